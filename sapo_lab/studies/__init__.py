"""Declared studies: the spec, its runs, checkpoint rules, per-family scores, the results
table and the paired analysis. Built on ``sapo_lab.training``; nothing below imports it.

One module per job: :mod:`.spec` reads and checks a study file, :mod:`.expansion` turns it
into runs, :mod:`.runner` trains them (resumable), :mod:`.verdicts` judges collapse,
:mod:`.selected_eval` scores the selected checkpoints, :mod:`.record` and :mod:`.summary`
write a run's record and the study's table, :mod:`.environment` records the machine;
:mod:`.results` and :mod:`.analysis` read what a study wrote. Importing this package loads
no torch: the training stack is imported by the functions that train or evaluate.
"""

from .environment import capture_environment, kernel_fingerprint
from .expansion import expand_runs
from .record import finish_record
from .results import Study, load_study, results_root
from .runner import run_status, run_study
from .selected_eval import evaluate_selected, task_weights
from .spec import grid_leaf, load_declaration
from .summary import summary_row, write_summary
from .verdicts import collapse_verdict

__all__ = [
    "Study",
    "capture_environment",
    "collapse_verdict",
    "evaluate_selected",
    "expand_runs",
    "finish_record",
    "grid_leaf",
    "kernel_fingerprint",
    "load_declaration",
    "load_study",
    "results_root",
    "run_status",
    "run_study",
    "summary_row",
    "task_weights",
    "write_summary",
]
