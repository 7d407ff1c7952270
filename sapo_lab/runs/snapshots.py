"""What a run saved at its steps: the metric rows, and the weights in ``snapshots/`` and ``checkpoints/``.

The trainer keeps its two newest checkpoints (``checkpoints/step-NNNNNN/``,
:func:`sapo_lab.runs.checkpoint.save_checkpoint`); :func:`save_snapshot` writes weights alone to
``snapshots/step-NNNNNN/model.safetensors`` (the study runner calls it at every dev evaluation).
Which step to report is a rule's choice (:mod:`sapo_lab.studies.checkpoint_rules`); this module says
which steps have weights and where they are, and refuses a step that has none. Reading needs the
standard library alone; only writing a snapshot loads torch (through safetensors).
"""

from __future__ import annotations

import os

from .durable import install
from .run_folder import CHECKPOINTS, METRICS, SNAPSHOTS, RunFolder, parse_step_dir, step_dir_name

WEIGHTS = "model.safetensors"  # a saved step's weights file, in checkpoints/step-N/ or snapshots/step-N/


class CheckpointMissing(ValueError):
    """The selected step's weights were never saved or have been pruned."""


def run_metric_rows(run_dir: str) -> list[dict]:
    """The rows of ``run_dir/metrics.jsonl`` as :func:`sapo_lab.runs.run_folder.read_metrics` reads them
    (a torn last line left out; any other damaged line an error naming it)."""
    folder = RunFolder(run_dir)
    if not os.path.isfile(folder.metrics):
        raise ValueError(f"{run_dir} has no {METRICS}")
    return folder.read_metrics().rows


def saved_steps(run_dir: str) -> list[int]:
    """Steps that have weights on disk (trainer checkpoints or snapshots), sorted."""
    steps = set()
    for sub in (CHECKPOINTS, SNAPSHOTS):
        root = os.path.join(run_dir, sub)
        if os.path.isdir(root):
            for d in os.listdir(root):
                if parse_step_dir(d) is not None and os.path.isfile(os.path.join(root, d, WEIGHTS)):
                    steps.add(parse_step_dir(d))
    return sorted(steps)


def weights_for_step(run_dir: str, step: int) -> str:
    """Path of ``model.safetensors`` for ``step``; :class:`CheckpointMissing` if there is none."""
    for sub in (CHECKPOINTS, SNAPSHOTS):
        path = os.path.join(run_dir, sub, step_dir_name(step), WEIGHTS)
        if os.path.isfile(path):
            return path
    saved = saved_steps(run_dir)
    below = [s for s in saved if s < step]
    above = [s for s in saved if s > step]
    raise CheckpointMissing(
        f"{run_dir}: no weights for selected step {step} (never saved, or pruned: the trainer keeps its 2 newest "
        f"checkpoints); nearest saved steps: {below[-1] if below else None} and {above[0] if above else None}. "
        "Snapshot every step the rule can choose, or declare the rule over saved steps."
    )


def save_snapshot(run_dir: str, step: int, model) -> str:
    """Write the model's weights to ``snapshots/step-NNNNNN/model.safetensors`` atomically."""
    from safetensors.torch import save_model  # torch only when a run writes weights

    final = os.path.join(RunFolder(run_dir).snapshots, step_dir_name(step))
    os.makedirs(final, exist_ok=True)
    tmp = os.path.join(final, f".{WEIGHTS}.tmp-{os.getpid()}")
    save_model(model, tmp)
    install(tmp, os.path.join(final, WEIGHTS))
    return final
