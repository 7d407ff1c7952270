"""``replicate``'s own numbers and verdict at their edges: a resumed run's training time over both of its
invocations, the plan's minutes, and the declared verdict where an interval or a mean sits exactly on zero or a
p-value exactly on the level. Expected values are typed here with their arithmetic."""

import os
from types import SimpleNamespace

import pytest

from sapo_lab.evidence.paired import compare
from sapo_lab.runs.study_folder import StudyFolder
from sapo_lab.studies import replicate
from sapo_lab.studies.replicate import Question, plan_text, training_seconds, verdict


@pytest.fixture
def study(tmp_path):
    """A study folder holding two runs: one trained in two invocations (interrupted, then resumed), one in one."""
    folder = StudyFolder(str(tmp_path / "tiny"))
    for run_id in ("sapo_seed0", "grpo_seed0"):
        os.makedirs(folder.run(run_id).path)
    resumed = folder.run("sapo_seed0")
    resumed.append_wall("started", 600.0)
    resumed.append_wall("resumed", 300.0)
    folder.run("grpo_seed0").append_wall("started", 120.0)
    return SimpleNamespace(folder=folder)


def test_a_resumed_runs_training_time_counts_every_invocation(study):
    # 600 s before the interruption + 300 s after it + 120 s for the other run = 1020 s.
    # Catches: only the last invocation of a resumed run counted (420 s), or only the first (720 s)
    assert study.folder.run("sapo_seed0").read_wall() == [{"action": "started", "wall_s": 600.0},
                                                          {"action": "resumed", "wall_s": 300.0}]
    assert training_seconds(study, ["sapo_seed0", "grpo_seed0"]) == 1020.0
    assert training_seconds(study, ["sapo_seed0"]) == 900.0


def test_a_run_with_no_recorded_time_makes_the_total_unknown(study):
    # catches: an unrecorded run counted as 0 s, which would print a plan shorter than the producer's time
    assert training_seconds(study, ["sapo_seed0", "gspo_seed0"]) is None


def test_the_plan_states_the_producers_minutes_in_total_and_a_run(tmp_path):
    # 1020 s = 17 min over 2 runs to train = 8.5 min a run, typed here. Catches: the per-run time divided by
    # every run of the question (4) instead of the ones this invocation trains, and seconds printed as minutes
    question = Question("tiny", "Q1", "Does SAPO differ from GRPO?", ("sapo", "grpo"), {})
    runs = [{"run_id": f"{m}_seed{s}"} for m in ("sapo", "grpo") for s in (0, 1)]
    text = plan_text(question, runs, ["sapo_seed1", "grpo_seed1"], 1020.0, "Xeon", tmp_path / "tiny")
    assert text.startswith(f"replicate tiny Q1: 4 runs (sapo, grpo) into {tmp_path / 'tiny'}, 2 to train in this "
                           "invocation; ")
    assert "the producer's machine (Xeon) recorded 17 min of training for these (8.5 min a run" in text
    assert plan_text(question, runs, ["sapo_seed1"], None, "Xeon", tmp_path).endswith(
        "; the producer recorded no usable time for them")
    assert plan_text(question, runs, [], 1020.0, "Xeon", tmp_path).endswith("0 to train in this invocation")


def _cmp(mean, lo, hi):
    return {"mean": mean, "t_interval": [lo, hi], "differences": [0.1, 0.2]}


def test_a_replication_mean_of_exactly_zero_is_on_neither_side():
    # the committed mean is below zero; this machine's mean is exactly 0 with overlapping intervals: 0 lies on no
    # side of zero, so the declared rule ("on the committed mean's side of zero") is not met.
    # Catches: `<=` in the side test (0 counted as below zero)
    committed = _cmp(-0.075, -0.124, -0.026)
    assert verdict(committed, _cmp(0.0, -0.03, 0.03), same_kernels=False) == "not consistent"
    assert verdict(committed, _cmp(-0.001, -0.03, 0.028), same_kernels=False) == "consistent"


def test_a_committed_interval_ending_at_zero_holds_zero_and_accepts_either_sign():
    # [-0.06, 0.0] holds zero (its upper end is zero), so a replication on the other side is consistent when the
    # intervals overlap. Catches: `hi <= 0` in the committed side (an interval ending at zero read as below zero)
    committed = _cmp(-0.03, -0.06, 0.0)
    assert verdict(committed, _cmp(0.01, -0.02, 0.04), same_kernels=False) == "consistent"
    assert verdict(_cmp(-0.03, -0.06, -1e-9), _cmp(0.01, -0.02, 0.04), same_kernels=False) == "not consistent"


def test_intervals_one_hair_apart_do_not_overlap():
    # touching intervals overlap (tested beside the rule); a gap of 1e-9 does not. Catches: an overlap test with a
    # tolerance, or one end compared with the wrong end
    committed = _cmp(-0.075, -0.124, -0.026)
    assert verdict(committed, _cmp(-0.15, -0.2, -0.124 - 1e-9), same_kernels=False) == "not consistent"
    assert verdict(committed, _cmp(-0.01, -0.026 + 1e-9, 0.01), same_kernels=False) == "not consistent"
    assert verdict(committed, _cmp(-0.01, -0.026, 0.01), same_kernels=False) == "consistent"


@pytest.mark.parametrize(("p_here", "reaches"), [(0.0499, True), (0.05, False), (0.0501, False)])
def test_a_p_value_exactly_at_alpha_does_not_reach_the_level(monkeypatch, p_here, reaches):
    # "reaches the level" is p < alpha, so p = 0.05 at alpha 0.05 does not. Catches: `<=`, and the words yes/no
    # swapped in the line a reader sees
    gaps = compare({s: (0.4 + 0.01 * s, 0.5) for s in range(10)}, "sapo", "grpo")
    committed = SimpleNamespace(name="tiny", path="committed", declaration={"analysis": {"alpha": 0.05}})
    replicated = SimpleNamespace(path="here", runs=[])
    p = {"committed": 0.001, "here": p_here}
    monkeypatch.setattr(replicate, "answer", lambda s, q: {"comparison": gaps, "p": p[s.path]})
    monkeypatch.setattr(replicate, "producer_kernels", lambda path: ({"k1"}, set()))
    question = Question("tiny", "Q1", "Does SAPO differ from GRPO?", ("sapo", "grpo"), {})
    record = replicate.conclude(committed, replicated, question, "k2")
    assert record.here_reaches_level is reaches
    assert f"  p < 0.05: committed yes, here {'yes' if reaches else 'no'}" in record.lines()
    assert "  sapo - grpo, mean paired difference, 95% t interval:" in record.lines()
