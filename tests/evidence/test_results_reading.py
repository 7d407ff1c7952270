"""Reading a study's runs (sapo_lab.evidence.results) where the committed studies never test it: non-finite
logged values and seeds past 9, on a results folder planted here."""

import json
import math

from sapo_lab.evidence.results import load_study


def _write_run(base, run_id, method, seed, rows):
    d = base / "runs" / run_id
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rec = {"run_id": run_id, "method": method, "seed": seed, "grid": {}, "selections": []}
    (d / "study_record.json").write_text(json.dumps(rec))


def _study(tmp_path, runs):
    (tmp_path / "experiments").mkdir()
    base = tmp_path / "results" / "planted"
    base.mkdir(parents=True)
    (base / "study.json").write_text(json.dumps({"name": "planted", "methods": {"sapo": {}}}))
    for run_id, seed, rows in runs:
        _write_run(base, run_id, "sapo", seed, rows)
    return load_study("planted", tmp_path / "results")


# Catches: a NaN or an infinity kept in a series (a mean over seeds, a median share of signal removed, or a
# curve would then be NaN or inf, and a diverged step read as a measurement).
def test_a_series_keeps_only_finite_measured_values(tmp_path):
    rows = [{"step": 1, "m": 0.5}, {"step": 2, "m": math.nan}, {"step": 3, "m": math.inf}, {"step": 4, "m": None},
            {"step": 5, "m": 0.25}, {"step": 6}]
    study = _study(tmp_path, [("sapo_seed0", 0, rows)])
    assert study.runs[0].series("m") == ([1, 5], [0.5, 0.25])


# Catches: runs ordered by their seed as text (seed 10 before seed 2): "a method's first seed" (the doctor map's
# cell activity, a chapter's example run) would then be another run.
def test_runs_are_ordered_by_seed_as_a_number(tmp_path):
    study = _study(tmp_path, [(f"sapo_seed{s}", s, [{"step": 1, "m": float(s)}]) for s in (10, 2, 9)])
    assert [r.seed for r in study.select("sapo")] == [2, 9, 10]
