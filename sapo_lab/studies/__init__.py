"""Declared studies: the spec, its runs, checkpoint rules, per-family scores and the study's table.
Built on ``sapo_lab.runs`` and ``sapo_lab.training``; nothing below imports it. Reading what a study
wrote (results, statistics, each study's findings) is :mod:`sapo_lab.evidence`'s.

One module per job: :mod:`.spec` reads and checks a study file, :mod:`.expansion` turns it
into runs, :mod:`.runner` trains them (resumable), :mod:`.verdicts` judges collapse,
:mod:`.selected_eval` scores the selected checkpoints, :mod:`.record` and :mod:`.summary`
write a run's record and the study's table, :mod:`.environment` records the machine.
Importing this package loads no transformers: the names below resolve on first use.
"""

from .._lazy import lazy_names

# Resolved on first use (PEP 562), so that declaring a study does not load transformers with the runner.
_LAZY = {
    "capture_environment": "environment", "kernel_fingerprint": "environment",
    "expand_runs": "expansion", "finish_record": "record",
    "run_status": "runner", "run_study": "runner",
    "evaluate_selected": "selected_eval",
    "grid_leaf": "spec", "load_declaration": "spec",
    "summary_row": "summary", "write_summary": "summary",
    "collapse_verdict": "verdicts",
}


__getattr__ = lazy_names(__name__, globals(), _LAZY)


__all__ = [
    "capture_environment",
    "collapse_verdict",
    "evaluate_selected",
    "expand_runs",
    "finish_record",
    "grid_leaf",
    "kernel_fingerprint",
    "load_declaration",
    "run_status",
    "run_study",
    "summary_row",
    "write_summary",
]
