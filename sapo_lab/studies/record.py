"""A finished run's ``study_record.json``: its collapse verdict, selected checkpoints and counters."""

from __future__ import annotations

import json
import os

from ..runs.durable import write_json
from ..runs.metric_names import ELAPSED_S
from ..runs.run_folder import RunFolder
from .selected_eval import evaluate_selected
from .verdicts import collapse_verdict


def finish_record(run: dict, run_dir: str, study: dict) -> dict:
    """Collapse verdict, selections with their eval breakdown, counters: ``study_record.json``."""
    from .checkpoint_rules import run_metric_rows

    path = os.path.join(run_dir, "study_record.json")
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    rows = run_metric_rows(run_dir)
    diverged = None
    if os.path.isfile(os.path.join(run_dir, "diverged.json")):
        with open(os.path.join(run_dir, "diverged.json")) as f:
            diverged = json.load(f)
        summary = {"status": "diverged", "steps": diverged["step"]}
    else:
        with open(RunFolder(run_dir).summary) as f:
            summary = json.load(f)
    last = rows[-1] if rows else {}
    record = {
        "run_id": run["run_id"],
        "method": run["method"],
        "seed": run["seed"],
        "grid": run["grid"],
        "status": summary["status"],
        "steps": summary["steps"],
        "collapse": collapse_verdict(rows, study["collapse"], diverged["step"] if diverged else None),
        "cold_start_pass1": summary.get("cold_start_pass1"),
        "final_pass1": summary.get("final_pass1"),
        "final_pass1_ci95": summary.get("final_pass1_ci95"),
        # the trainer's counters, cumulative over the run's rollout steps
        "rollout_tokens": last.get("counters/tokens_generated", 0),
        "update_tokens": last.get("counters/tokens_trained", 0),
        "optimizer_steps": last.get("counters/optimizer_steps", 0),
        "verifier_calls": last.get("counters/verifier_calls", 0),
        "train_elapsed_s": last.get(ELAPSED_S, 0.0),
        "selections": [],
    }
    if not diverged:
        for rule in study["selection"]:
            record["selections"].append(evaluate_selected(run_dir, run["config"], rule, study["breakdown_samples"]))
    write_json(path, record)
    return record
