"""A study's table: ``summary.csv`` and ``summary.json``, one row per finished run."""

from __future__ import annotations

import csv
import io

from ..evidence.results import selection_tag
from ..runs.study_folder import StudyFolder
from .spec import grid_leaf


def summary_row(record: dict, wall: float) -> dict:
    """One run's row of the summary: its record flattened, grid keys by leaf name, selections by tag."""
    row = {
        "run_id": record["run_id"],
        "method": record["method"],
        "seed": record["seed"],
        **{grid_leaf(k): v for k, v in record["grid"].items()},
        "status": record["status"],
        "steps": record["steps"],
        "collapsed": record["collapse"]["collapsed"],
        "collapse_step": record["collapse"]["step"],
        "collapse_reason": record["collapse"]["reason"],
        "cold_start_pass1": record["cold_start_pass1"],
        "final_pass1": record["final_pass1"],
        "final_pass1_lo": (record["final_pass1_ci95"] or [None, None])[0],
        "final_pass1_hi": (record["final_pass1_ci95"] or [None, None])[1],
    }
    for sel in record["selections"]:
        tag = selection_tag(sel)
        row[f"{tag}_step"] = sel.get("step")
        row[f"{tag}_dev_pass1"] = sel.get("dev_pass1")
        ev = sel.get("eval")
        row[f"{tag}_eval_pass1"] = ev["weighted"]["pass1"] if ev else None
        if ev:
            for fam, cell in ev["by_family"].items():
                row[f"{tag}_eval_pass1_{fam}"] = cell["pass1"]
        row[f"{tag}_error"] = sel.get("error")
    for key in ("rollout_tokens", "update_tokens", "optimizer_steps", "verifier_calls", "train_elapsed_s"):
        row[key] = record[key]
    row["run_wall_s"] = wall
    return row


def write_summary(out: str, runs: list[dict], study: dict) -> list[dict]:
    """``summary.csv`` / ``summary.json``: one row per finished run, in declaration order."""
    rows, study_folder = [], StudyFolder(out)
    for run in runs:
        folder = study_folder.run(run["run_id"])
        if not folder.has_record():
            continue
        wall = sum((h["wall_s"] for h in folder.read_wall()), 0.0)
        rows.append(summary_row(folder.read_record(), wall))
    fields = list(dict.fromkeys(k for r in rows for k in r))
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
    study_folder.write_summary(rows, table.getvalue())
    return rows
