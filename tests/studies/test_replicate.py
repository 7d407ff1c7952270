"""``python -m sapo_lab replicate``: a declared question re-run here, read beside the committed answer.

The end-to-end test commits a tiny study (two seeds, SAPO against GRPO, a declared Q1), replicates Q1 through
the command line on this machine and expects ``identical`` (same kernels, so every run repeats bit for bit);
then it plants a different committed answer and expects the verdict to change. The verdict rule itself is
checked on planted comparisons on each side of each condition.
"""

import json
import shutil

import pytest
from _micro import MICRO, PRESET

from sapo_lab.cli import main
from sapo_lab.evidence.results import load_study
from sapo_lab.studies import run_study
from sapo_lab.studies.replicate import REPLICATIONS, find_question, read_records, verdict

BASE = {k: v for k, v in MICRO.items() if k != "optimization.max_steps"}
ANALYSIS = {
    "declared": "before running",
    "declared_utc": "2026-12-05",
    "endpoint": {"metric": "final_pass1", "checkpoint": "final", "evaluation": "the trainer's final evaluation"},
    "alpha": 0.05,
    "tests": [{"id": "Q1", "question": "Does SAPO differ from GRPO?", "method": "sapo", "reference": "grpo",
               "cell": {}, "test": "paired_t"}],
}


def _committed_study(tmp_path):
    study = {
        "name": "tiny", "description": "test", "preset": PRESET, "base": BASE,
        "methods": {"sapo": {"loss_type": "sapo"}, "grpo": {"loss_type": "grpo"}, "gspo": {"loss_type": "gspo"}},
        "seeds": [0, 1], "budget": {"max_steps": 3},
        "collapse": [{"metric": "entropy", "kind": "below", "threshold": 0.0, "patience": 5}],
        "selection": [{"by": "final"}], "breakdown_samples": 0, "snapshot_every": 0, "analysis": ANALYSIS,
    }
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(study))
    root = tmp_path / "results"
    run_study(str(path), str(root), methods=["sapo", "grpo"], log=lambda m: None, progress=False)
    return root


def _cmp(mean, lo, hi, diffs=(0.1, 0.2)):
    return {"mean": mean, "t_interval": [lo, hi], "differences": list(diffs)}


def test_the_verdict_rule_on_each_side():
    committed = _cmp(-0.075, -0.124, -0.026)
    # identical only with the producer's kernels and equal differences (catches: identical on other kernels)
    assert verdict(committed, dict(committed), same_kernels=True) == "identical"
    assert verdict(committed, dict(committed), same_kernels=False) == "consistent"
    assert verdict(committed, _cmp(-0.075, -0.124, -0.026, diffs=(0.1, 0.3)), same_kernels=True) == "consistent"
    # overlapping and on the same side, although this interval holds zero (catches: demanding significance)
    assert verdict(committed, _cmp(-0.02, -0.05, 0.01), False) == "consistent"
    # the other side of zero, intervals overlapping (catches: overlap alone)
    assert verdict(committed, _cmp(0.001, -0.03, 0.032), False) == "not consistent"
    # the same side, intervals apart (catches: sign alone)
    assert verdict(committed, _cmp(-0.30, -0.35, -0.25), False) == "not consistent"
    # a committed interval holding zero accepts either sign if the intervals overlap
    assert verdict(_cmp(0.01, -0.02, 0.04), _cmp(-0.01, -0.03, 0.01), False) == "consistent"
    assert verdict(_cmp(0.01, -0.02, 0.04), _cmp(-0.2, -0.3, -0.1), False) == "not consistent"
    # touching intervals overlap (boundary)
    assert verdict(committed, _cmp(-0.15, -0.2, -0.124), False) == "consistent"


def test_each_side_reaches_the_level_by_its_own_p(monkeypatch):
    # catches: "here reaches the level" read from the committed p: a committed answer below alpha and a
    # replication above it must report yes for the committed and no for this machine
    from types import SimpleNamespace

    from sapo_lab.evidence.paired import compare
    from sapo_lab.studies import replicate

    below = compare({s: (0.4 + 0.01 * s, 0.5) for s in range(10)}, "sapo", "grpo")   # p far below 0.05
    across = compare({s: (0.5 + (0.05 if s % 2 else -0.04), 0.5) for s in range(10)}, "sapo", "grpo")
    assert below.t_p < 0.05 < across.t_p
    committed = SimpleNamespace(name="tiny", path="committed", declaration={"analysis": {"alpha": 0.05}})
    replicated = SimpleNamespace(path="here", runs=[])
    answers = {"committed": below, "here": across}
    monkeypatch.setattr(replicate, "answer", lambda study, q: {"comparison": answers[study.path],
                                                                "p": answers[study.path].t_p})
    monkeypatch.setattr(replicate, "producer_kernels", lambda path: ({"k1"}, set()))
    question = replicate.Question("tiny", "Q1", "Does SAPO differ from GRPO?", ("sapo", "grpo"), {})
    record = replicate.conclude(committed, replicated, question, "k2")
    assert (record.committed_reaches_level, record.here_reaches_level) == (True, False)
    assert "  p < 0.05: committed yes, here no" in record.lines()


def test_questions_are_found_and_others_refused_in_one_line():
    confirm = load_study("confirm_addition")
    q1 = find_question(confirm, "Q1")
    assert q1.methods == ("sapo", "grpo") and q1.cell == {}
    q4 = find_question(confirm, "Q4")  # a tuning arm: every arm's methods
    assert set(q4.methods) == {"sapo_tau_x0.5", "sapo", "sapo_tau_x2", "grpo_eps0.1", "grpo", "grpo_eps0.3"}
    with pytest.raises(ValueError, match="no question 'Q9'.*Q1"):
        find_question(confirm, "Q9")
    with pytest.raises(ValueError, match="G5 is a contrast"):
        find_question(load_study("gate_map"), "G5")


def test_a_gate_map_question_runs_only_its_methods(tmp_path):
    from sapo_lab.studies.replicate import question_runs

    gate_map = load_study("gate_map")
    question = find_question(gate_map, "G1")
    runs = question_runs(gate_map, question, str(tmp_path))
    # catches: every method of the map (480 runs) replicated instead of G1's two methods x ten seeds
    assert sorted(r["run_id"] for r in runs) == sorted(
        f"{m}_seed{s}" for m in question.methods for s in gate_map.declaration["seeds"])


@pytest.mark.slow
def test_replicate_on_the_producers_kernels_is_identical_and_a_changed_answer_is_not(tmp_path, capsys):
    root = _committed_study(tmp_path)
    argv = ["replicate", "tiny", "Q1", "--results-root", str(root), "--no-progress"]
    assert main([*argv, "--dry-run"]) == 0
    assert "4 runs (sapo, grpo) into " in (err := capsys.readouterr().err) and "4 to train in this invocation" in err
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny Q1: IDENTICAL"), out
    (record,) = read_records(root)
    assert record["verdict"] == "identical" and record["committed"]["differences"] == record["here"]["differences"]
    assert len(record["runs"]) == 4  # gspo, not part of Q1, was not trained
    replicated = next((root / REPLICATIONS).iterdir()) / "tiny"
    assert not (replicated / "runs" / "gspo_seed0").exists()

    # Plant another committed answer: seed 0's SAPO endpoint moved far away. Catches a verdict read from the
    # replication alone, or from fingerprints without comparing the numbers.
    rec = root / "tiny" / "runs" / "sapo_seed0" / "study_record.json"
    data = json.loads(rec.read_text())
    data["final_pass1"] = data["final_pass1"] + 0.9
    rec.write_text(json.dumps(data))
    status = main(argv)  # nothing to train: the runs are finished
    out = capsys.readouterr().out
    assert "IDENTICAL" not in out.splitlines()[0]
    assert status == (1 if "NOT CONSISTENT" in out else 0)
    (record,) = read_records(root)  # the rerun replaced the question's entry
    assert record["verdict"] != "identical"


def test_replicate_refuses_bad_input_in_one_line(tmp_path, capsys):
    shutil.copytree("results/confirm_addition", tmp_path / "confirm_addition",
                    ignore=shutil.ignore_patterns("runs"))
    for argv, expected in (
        (["replicate", "nosuch", "Q1"], "holds no study"),
        (["replicate", "confirm_addition", "Q9", "--results-root", str(tmp_path)], "no question 'Q9'"),
        (["replicate", "confirm_addition", "Q1", "--shard", "2/2"], "--shard must be I/N"),
        (["replicate", "confirm_addition", "Q1", "--kernels", "avx9"], "invalid choice"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err


def test_replicate_refuses_a_path_a_damaged_study_and_a_foreign_replication_in_one_line(tmp_path, capsys):
    """From the outside test: a study given as a path compared the committed study with itself; a committed study
    missing a run failed only after training, with a traceback; a replication folder of another declaration was
    trusted. Each is now one line, exit 2, before anything trains."""
    def refused(argv, expected):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err

    refused(["replicate", "results/confirm_addition", "Q1"], "not a path")
    refused(["replicate", "../confirm_addition", "Q1"], "not a path")
    (tmp_path / "afile").write_text("x")
    refused(["replicate", "confirm_addition", "Q1", "--results-root", str(tmp_path / "afile")], "is not a folder")
    damaged = tmp_path / "damaged"
    shutil.copytree("results/confirm_addition", damaged / "confirm_addition")
    shutil.rmtree(damaged / "confirm_addition" / "runs" / "sapo_seed10")
    refused(["replicate", "confirm_addition", "Q1", "--results-root", str(damaged), "--dry-run"], "pending")
    (damaged / "confirm_addition" / "environment.json").write_text("{}")
    refused(["replicate", "confirm_addition", "Q1", "--results-root", str(damaged), "--dry-run"],
            "cannot be read as a committed study")


@pytest.mark.slow
def test_a_replication_folder_of_another_declaration_is_refused(tmp_path, capsys):
    root = _committed_study(tmp_path)
    argv = ["replicate", "tiny", "Q1", "--results-root", str(root), "--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    replicated = next((root / REPLICATIONS).iterdir()) / "tiny"
    config = replicated / "runs" / "sapo_seed0" / "config.json"
    saved = json.loads(config.read_text())
    saved["loss"]["loss_type"] = "grpo"  # catches a verdict read from runs that are not the declared ones
    config.write_text(json.dumps(saved))
    assert main(argv) == 2
    assert "is not the config tiny declares for sapo_seed0" in capsys.readouterr().err


def test_another_kernel_setting_is_chosen_before_torch_loads(tmp_path):
    """`--kernels avx2` from the command line (a fresh process): applied before torch, not refused; the plan names
    the replication folder of the fingerprint under that setting."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "sapo_lab", "replicate", "confirm_addition", "Q1", "--kernels", "avx2",
                          "--dry-run"], capture_output=True, text=True, env={**__import__("os").environ,
                                                                           "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr
    assert "replications/" in out.stderr and "to train in this invocation" in out.stderr
