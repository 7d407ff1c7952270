"""Reading studies (sapo_lab.evidence.results) on a hand-built results folder whose answers are known."""

import json

import pytest

from sapo_lab.evidence.results import load_study, results_root, seed_band, spread


def _write_run(base, run_id, method, seed, grid, rows, finished=True):
    d = base / "runs" / run_id
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if finished:
        rec = {"run_id": run_id, "method": method, "seed": seed, "grid": grid,
               "selections": [{"by": "step", "value": 2, "step": 2}, {"by": "final", "step": 3}]}
        (d / "study_record.json").write_text(json.dumps(rec))


@pytest.fixture
def study(tmp_path):
    (tmp_path / "experiments").mkdir()
    base = tmp_path / "results" / "toy"
    base.mkdir(parents=True)
    decl = {"name": "toy", "methods": {"sapo": {}, "grpo": {}}, "grid": {"optimization.learning_rate": [0.1, 0.2]}}
    (base / "study.json").write_text(json.dumps(decl))
    lr = {"optimization.learning_rate": 0.1}
    _write_run(base, "sapo_seed0", "sapo", 0, lr, [{"step": 1, "m": 1.0}, {"step": 2, "m": None}, {"step": 3, "m": 3.0}])
    _write_run(base, "sapo_seed1", "sapo", 1, lr, [{"step": 1, "m": 2.0}, {"step": 2, "m": 5.0}, {"step": 3, "m": 1.0}])
    _write_run(base, "grpo_seed0", "grpo", 0, {"optimization.learning_rate": 0.2}, [{"step": 1, "m": 0.0}])
    _write_run(base, "grpo_seed1", "grpo", 1, {"optimization.learning_rate": 0.2}, [{"step": 1}], finished=False)
    return tmp_path


def test_finished_runs_only_in_declaration_order(study):
    """Catches: an unfinished run (no study_record.json) read as evidence; alphabetical instead of declared order."""
    s = load_study("toy", study / "results")
    assert [r.run_id for r in s.runs] == ["sapo_seed0", "sapo_seed1", "grpo_seed0"]
    assert [r.run_id for r in s.select("sapo", learning_rate=0.1)] == ["sapo_seed0", "sapo_seed1"]
    assert s.select("sapo", learning_rate=0.2) == [] and s.grid_values("learning_rate") == [0.1, 0.2]
    assert s.runs[0].selection("step_2")["step"] == 2 and s.runs[0].selection("final")["step"] == 3


def test_seed_band_uses_steps_every_seed_measured(study):
    """Catches: a null counted as 0, or a step one seed did not measure averaged over the others."""
    s = load_study("toy", study / "results")
    b = seed_band(s.select("sapo"), "m")
    assert b.steps == [1, 3] and b.mean == [1.5, 2.0] and b.low == [1.0, 1.0] and b.high == [2.0, 3.0] and b.seeds == 2


def test_spread_and_root(study, monkeypatch):
    """Catches: population instead of sample standard deviation; a results folder found without experiments/."""
    out = spread([1.0, 2.0, 3.0, None])
    assert out["mean"] == 2.0 and out["sd"] == 1.0 and out["n"] == 3 and spread([4.0])["sd"] is None
    monkeypatch.chdir(study / "results" / "toy")
    assert results_root() == (study / "results").resolve()
    with pytest.raises(FileNotFoundError, match="no study"):
        load_study("missing", study / "results")


def test_provenance_names_every_command_and_marks_dirty_commits(study):
    from sapo_lab.evidence.results import provenance_markdown

    def invocation(shard, commit, dirty, start, wall):
        return {"argv": ["sapo_lab/__main__.py", "study", "experiments/toy.json", "--shard", shard], "git_commit": commit,
                "git_dirty": dirty, "started_utc": start, "finished_utc": start, "wall_s": wall, "torch": "2.13.0+cpu",
                "cpu_count": 2}

    invocations = [invocation("0/2", "a" * 40, False, "2026-12-02T10:00:00", 60.0),
                   invocation("1/2", "b" * 40, True, "2026-12-02T09:00:00", 120.0)]
    (study / "results" / "toy" / "environment.json").write_text(json.dumps({"invocations": invocations}))
    toy = load_study("toy", root=study / "results")
    p = toy.provenance()
    # a shard left out, a dirty tree shown as clean, or the wrong end of the time span would each fail here
    assert p["commands"] == ["python -m sapo_lab study experiments/toy.json --shard 0/2",
                             "python -m sapo_lab study experiments/toy.json --shard 1/2"]
    assert p["commits"] == ["aaaaaaa", "bbbbbbb+"] and p["started"] == "2026-12-02T09:00" and p["wall_s"] == 180.0
    table = provenance_markdown([toy])
    assert table.count("\n") == 2 and "bbbbbbb+" in table and "3 min" in table


def test_value_tag_names_the_same_number_in_runner_and_reader(tmp_path):
    """A selection value >= 1e6 once became "1e-06" in summary.csv (the runner replaced the exponent's
    "+" with "-") while the reader wrote "1e+06": the column named another number, and the reader
    could not find it. Runner and reader now share one tag, and every tag parses back to its value."""
    from sapo_lab.evidence.results import Run, value_tag
    from sapo_lab.studies.summary import summary_row

    for value in (1e6, 2.5e7, 2e-4, 1e-6, 0.0002, 50000, 60):
        assert float(value_tag(value)) == value, value
    sel = {"by": "rollout_tokens", "value": 1e6, "step": 40, "dev_pass1": 0.5}
    record = {"run_id": "r", "method": "sapo", "seed": 0, "grid": {}, "status": "completed", "steps": 40,
              "collapse": {"collapsed": False, "step": None, "reason": None}, "cold_start_pass1": 0.1,
              "final_pass1": 0.5, "final_pass1_ci95": None, "selections": [sel], "rollout_tokens": 1,
              "update_tokens": 1, "optimizer_steps": 1, "verifier_calls": 1, "train_elapsed_s": 1.0}
    row = summary_row(record, 1.0)
    column = next(k for k in row if k.endswith("_step") and k.startswith("rollout_tokens"))
    tag = column[: -len("_step")]
    assert float(tag.split("_")[-1]) == 1e6
    assert Run("r", "sapo", 0, {}, record, tmp_path).selection(tag) is sel


def test_cold_start_key_separates_tasks_not_methods():
    """Runs of one seed and task share a cold start; the same seed on another task does not. Clustering
    pairs by seed alone (a plausible shortcut) would merge the scratchpad and addition cold starts."""
    from sapo_lab.evidence.results import load_study

    main, long = load_study("main_comparison"), load_study("staleness_long")
    sapo0, grpo0 = main.select("sapo")[0], main.select("grpo")[0]
    assert sapo0.seed == grpo0.seed == 0 and sapo0.cold_start_key == grpo0.cold_start_key
    long0 = next(r for r in long.runs if r.seed == 0)
    assert long0.cold_start_key != sapo0.cold_start_key
