"""A study's declared rules at their edges: each bound of a declaration, a selection rule, a collapse criterion, a
per-family aggregate and a replication's level, tried on the bound and a step to each side, with the expected
outcome typed here (worked out by hand in the comments)."""

import io
import json
from types import SimpleNamespace

import pytest

from sapo_lab.evidence.endpoints import check_name
from sapo_lab.evidence.paired import compare
from sapo_lab.studies import replicate
from sapo_lab.studies.checkpoint_rules import select_step
from sapo_lab.studies.spec import load_declaration
from sapo_lab.studies.summary import summary_row, write_summary
from sapo_lab.studies.verdicts import collapse_verdict

STUDY = {"name": "edges", "methods": {"sapo": {"loss_type": "sapo"}}, "seeds": [3, 7], "budget": {"max_steps": 6},
         "collapse": [{"metric": "dev_pass1", "kind": "below", "threshold": 0.1}]}


def _declare(tmp_path, **changes):
    study = {**STUDY, **changes}
    path = tmp_path / "edges.json"
    path.write_text(json.dumps(study))
    return load_declaration(str(path))


# ---------------------------------------------------------------- the declaration's bounds


@pytest.mark.parametrize(("snapshot_every", "ok"), [(0, True), (1, True), (-1, False), ("dev", True)])
def test_snapshot_every_accepts_zero_and_refuses_a_negative(tmp_path, snapshot_every, ok):
    """Catches `> 0` for `>= 0`: the spec says "an integer >= 0" (0: no snapshots kept)."""
    if ok:
        assert _declare(tmp_path, snapshot_every=snapshot_every)["snapshot_every"] == snapshot_every
    else:
        with pytest.raises(ValueError, match="snapshot_every must be 'dev' or an integer >= 0"):
            _declare(tmp_path, snapshot_every=snapshot_every)


@pytest.mark.parametrize(("samples", "ok"), [(0, True), (1, True), (-1, False)])
def test_breakdown_samples_accepts_zero_and_refuses_a_negative(tmp_path, samples, ok):
    """Catches `<= 0` for `< 0`: 0 is the declared way to skip the per-family evaluation."""
    if ok:
        assert _declare(tmp_path, breakdown_samples=samples)["breakdown_samples"] == samples
    else:
        with pytest.raises(ValueError, match="breakdown_samples must be an integer >= 0"):
            _declare(tmp_path, breakdown_samples=samples)


def test_the_defaults_a_declaration_relies_on(tmp_path):
    """Catches a default changed: the module's docstring example states 4 samples per eval prompt, snapshots at
    every dev step, the cpu-tiny preset and the best-dev and final checkpoints."""
    study = _declare(tmp_path)
    assert study["breakdown_samples"] == 4 and study["snapshot_every"] == "dev" and study["preset"] == "cpu-tiny"
    assert study["selection"] == [{"by": "best_dev"}, {"by": "final"}]


@pytest.mark.parametrize(("patience", "ok"), [(1, True), (2, True), (0, False), (-1, False)])
def test_a_collapse_patience_is_at_least_one(tmp_path, patience, ok):
    """Catches `< 0` for `< 1`: a patience of 0 measurements would call every run collapsed before it starts."""
    collapse = [{"metric": "dev_pass1", "kind": "below", "threshold": 0.1, "patience": patience}]
    if ok:
        assert _declare(tmp_path, collapse=collapse)["collapse"][0]["patience"] == patience
    else:
        with pytest.raises(ValueError, match="patience must be an integer >= 1"):
            _declare(tmp_path, collapse=collapse)


def test_a_repeated_seed_is_refused(tmp_path):
    """Catches the repeat check loosened: seeds [3, 7, 3] would train seed 3 twice and pair it with itself."""
    with pytest.raises(ValueError, match=r"study 'seeds' repeats a seed: \[3, 7, 3\]"):
        _declare(tmp_path, seeds=[3, 7, 3])


# ---------------------------------------------------------------- a budget rule at its budget


ROWS = [{"step": s, "eval/dev_pass1": None, "counters/tokens_generated": 250 * s, "time/elapsed_s": 1.5 * s}
        for s in range(1, 5)]  # 250, 500, 750, 1000 tokens; 1.5, 3.0, 4.5, 6.0 s


@pytest.mark.parametrize(("by", "budget", "step", "ended"), [
    ("rollout_tokens", 1000, 4, True),    # the run used exactly its budget: it fits, and ended within it
    ("rollout_tokens", 999, 3, False),    # one token short: step 4 would cross it
    ("rollout_tokens", 1001, 4, True),
    ("wall_clock", 6.0, 4, True),
    ("wall_clock", 5.9, 3, False),
])
def test_a_run_that_used_exactly_its_budget_ended_within_it(by, budget, step, ended):
    """Catches `<` for `<=` in "the whole run fit in the budget" (`ended_before_budget`) and in the steps within
    the budget: cumulative use equal to the budget is within it."""
    choice = select_step(ROWS, by, budget)
    assert choice["step"] == step and choice["ended_before_budget"] is ended


# ---------------------------------------------------------------- a collapse criterion's defaults and gaps


def test_drop_from_best_counts_from_any_best_by_default():
    """Catches a default `min_best` other than 0: a best of 0.05 that halves (0.02 < 0.5 * 0.05) is a drop when
    the criterion declares no min_best."""
    rows = [{"step": 1, "eval/dev_pass1": 0.05}, {"step": 2, "eval/dev_pass1": 0.02}]
    got = collapse_verdict(rows, [{"metric": "dev_pass1", "kind": "drop_from_best", "fraction": 0.5}])
    assert (got["collapsed"], got["step"]) == (True, 2)


def test_a_step_without_the_metric_neither_counts_nor_resets_the_patience():
    """Catches a null row resetting the run of bad measurements: dev is measured at steps 1 and 3 only, both
    below 0.1, so patience 2 fires at step 3 ("consecutive measurements", not consecutive steps)."""
    rows = [{"step": 1, "eval/dev_pass1": 0.05}, {"step": 2, "eval/dev_pass1": None},
            {"step": 3, "eval/dev_pass1": 0.04}]
    got = collapse_verdict(rows, [{"metric": "dev_pass1", "kind": "below", "threshold": 0.1, "patience": 2}])
    assert (got["collapsed"], got["step"]) == (True, 3)


# ---------------------------------------------------------------- the summary's row and wall time


def _record(run_id="sapo_seed3"):
    return {"run_id": run_id, "method": "sapo", "seed": 3, "grid": {"optimization.learning_rate": 2e-4},
            "status": "done", "steps": 6, "collapse": {"collapsed": False, "step": None, "reason": None},
            "cold_start_pass1": 0.25, "final_pass1": 0.5, "final_pass1_ci95": [0.375, 0.625], "selections": [],
            "rollout_tokens": 1, "update_tokens": 2, "optimizer_steps": 3, "verifier_calls": 4,
            "train_elapsed_s": 5.0}


def test_the_summary_row_keeps_both_ends_of_the_interval():
    """Catches the upper end written from the lower one: [0.375, 0.625] gives lo 0.375 and hi 0.625."""
    row = summary_row(_record(), 12.5)
    assert (row["final_pass1_lo"], row["final_pass1_hi"]) == (0.375, 0.625)
    assert row["learning_rate"] == 2e-4 and row["run_wall_s"] == 12.5


def test_a_resumed_runs_wall_time_sums_every_invocation(tmp_path):
    """Catches the wall time of the last invocation only: a run started (100 s) then resumed (40 s) took 140 s."""
    from sapo_lab.runs.study_folder import StudyFolder

    folder = StudyFolder(str(tmp_path / "edges")).run("sapo_seed3")
    (tmp_path / "edges" / "runs" / "sapo_seed3").mkdir(parents=True)
    folder.write_record(_record())
    folder.append_wall("started", 100.0)
    folder.append_wall("resumed", 40.0)
    rows = write_summary(str(tmp_path / "edges"), [{"run_id": "sapo_seed3"}], STUDY)
    assert rows[0]["run_wall_s"] == 140.0


# ---------------------------------------------------------------- a replication's level, a name's nearest


def test_a_committed_p_exactly_at_alpha_does_not_reach_the_level(monkeypatch):
    """Catches `<=` for `<` on the committed side: "reaches the level" is p < alpha, so a committed p of 0.05 at
    alpha 0.05 reports "committed no"."""
    gaps = compare({s: (0.4 + 0.01 * s, 0.5) for s in range(10)}, "sapo", "grpo")
    committed = SimpleNamespace(name="tiny", path="committed", declaration={"analysis": {"alpha": 0.05}})
    replicated = SimpleNamespace(path="here", runs=[])
    p = {"committed": 0.05, "here": 0.001}
    monkeypatch.setattr(replicate, "answer", lambda s, q: {"comparison": gaps, "p": p[s.path]})
    monkeypatch.setattr(replicate, "producer_kernels", lambda path: ({"k1"}, set()))
    question = replicate.Question("tiny", "Q1", "Does SAPO differ from GRPO?", ("sapo", "grpo"), {})
    record = replicate.conclude(committed, replicated, question, "k2")
    assert record.committed_reaches_level is False
    assert "  p < 0.05: committed no, here yes" in record.lines()


def test_a_misspelt_name_always_gets_the_nearest_valid_name():
    """Catches difflib's default cutoff (0.6): a name far from every valid one ('zzz') must still be answered with
    the nearest, which the one-line error promises."""
    with pytest.raises(ValueError, match=r"test 'zzz' is not a name this study can use; did you mean 'paired_t'\?"):
        check_name("zzz", ["paired_t"], "test")


# ---------------------------------------------------------------- the runner's snapshots and run states


@pytest.mark.parametrize(("every", "steps"), [(3, [3, 6]), (1, [1, 2, 3, 4, 5, 6]), (0, []), ("dev", [2, 4])])
def test_snapshots_at_every_nth_step_or_at_each_dev_evaluation(monkeypatch, every, steps):
    """Catches an every-N count from the first step (1, 4 for N = 3: the steps are multiples of N, 3 and 6) and
    'dev' snapshotting steps where dev was not measured (dev at steps 2 and 4 only); 0 keeps none. The user's
    callback still sees every row."""
    from sapo_lab.studies import runner

    saved, seen = [], []
    monkeypatch.setattr(runner, "save_snapshot", lambda run_dir, step, model: saved.append(step))
    callback = runner._snapshot_callback("run", every, lambda trainer, row: seen.append(row["step"]))
    for step in range(1, 7):
        callback(SimpleNamespace(model=None), {"step": step, "eval/dev_pass1": 0.5 if step in (2, 4) else None})
    assert saved == steps and seen == [1, 2, 3, 4, 5, 6]


def test_a_diverged_run_is_done_and_an_empty_folder_pending(tmp_path):
    """Catches a diverged run (diverged.json, no summary) counted as unfinished: it would train again on every
    invocation. An empty folder is pending."""
    from sapo_lab.studies.runner import run_status

    run = tmp_path / "run"
    run.mkdir()
    assert run_status(str(run)) == "pending"
    (run / "diverged.json").write_text(json.dumps({"error": "loss is nan", "step": 4}))
    assert run_status(str(run)) == "done"


@pytest.mark.parametrize(("recorded", "passed_on"), [(0.0, 0.0), (90.0, 90.0), (None, None),
                                                     (float("nan"), None), (-5.0, None)])
def test_the_plan_keeps_a_recorded_time_of_zero_and_drops_an_impossible_one(monkeypatch, tmp_path, recorded,
                                                                             passed_on):
    """Catches `> 0` for `>= 0` on the producer's recorded training time: 0 s is a time the record states (the
    plan then says 0 min), while a missing, non-finite or negative one is no usable time at all."""
    from sapo_lab.studies import runner

    study = SimpleNamespace(path=tmp_path, name="tiny", environment={"invocations": [{"processor": "x86_64"}]})
    monkeypatch.setattr(replicate, "_read_committed", lambda name, root: study)
    monkeypatch.setattr(replicate, "find_question", lambda s, q: replicate.Question("tiny", "Q1", "?", ("sapo",), {}))
    monkeypatch.setattr(replicate, "answer", lambda s, q: {"comparison": object()})
    monkeypatch.setattr(replicate, "kernel_fingerprint", lambda: "k2")
    monkeypatch.setattr(replicate, "question_runs", lambda s, q, root: [{"run_id": "sapo_seed0"}])
    monkeypatch.setattr(runner, "run_status", lambda run_dir: "pending")
    monkeypatch.setattr(replicate, "training_seconds", lambda s, run_ids: recorded)
    seen = []
    monkeypatch.setattr(replicate, "plan_text", lambda q, runs, todo, wall, cpu, target: seen.append(wall) or "")
    args = SimpleNamespace(study="tiny", question="Q1", results_root=str(tmp_path), shard_pair=(0, 1),
                           log_file=io.StringIO(), dry_run=True)
    assert replicate.replicate_command(args) == 0
    assert seen == [passed_on]
