"""A finished run's ``study_record.json``: its collapse verdict, selected checkpoints and counters."""

from __future__ import annotations

from ..runs.metric_names import ELAPSED_S
from ..runs.snapshots import run_metric_rows
from ..runs.study_folder import StudyRunFolder
from .selected_eval import evaluate_selected
from .verdicts import collapse_verdict


def finish_record(run: dict, run_dir: str, study: dict) -> dict:
    """Collapse verdict, selections with their eval breakdown, counters: ``study_record.json``."""
    folder = StudyRunFolder(run_dir)
    if folder.has_record():
        return folder.read_record()
    rows = run_metric_rows(run_dir)
    diverged = folder.read_diverged()
    if diverged:
        summary = {"status": "diverged", "steps": diverged["step"]}
    else:
        summary = folder.read_summary()
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
    folder.write_record(record)
    return record
