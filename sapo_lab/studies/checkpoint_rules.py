"""Which checkpoint to report: best dev score, fixed step, fixed rollout tokens, or a wall-clock budget.

A rule picks a step from a run's ``metrics.jsonl`` (one row per rollout step, written by
the trainer: ``step``, ``eval/dev_pass1`` (``null`` between dev evaluations),
``counters/tokens_generated``, ``time/elapsed_s``, ...):

* ``best_dev``: the step with the highest ``eval/dev_pass1``; ties go to the earliest step
  (the cheapest of the equally good). Only steps where dev was measured compete.
* ``final``: the last logged step.
* ``step`` (value N): step N exactly.
* ``rollout_tokens`` (value B): the last step whose cumulative generated tokens
  ``counters/tokens_generated`` <= B.
* ``wall_clock`` (value S seconds): the last step whose ``time/elapsed_s`` <= S. The trainer's
  elapsed time counts training steps and dev evaluations, not the cold start or final
  evaluation, and it is measured on whatever machine ran the step: compare runs only
  from one machine.

If a run ended before a token or time budget, the rule picks its final step and says so
(``ended_before_budget``): such a run is not compared at the same budget.

The weights for a step live in ``checkpoints/step-NNNNNN/`` (trainer, every
``save_steps`` and at the end; :func:`sapo_lab.runs.checkpoint.save_checkpoint` keeps only the
two newest) or in ``snapshots/step-NNNNNN/`` (weights only, written by
:func:`save_snapshot`, e.g. by the study runner at every dev evaluation). Selection is
exact only if the chosen step has weights: for ``best_dev`` a snapshot at every dev
step; for budgets, a snapshot at every step, or a rule restricted in advance to the steps
that have weights (``candidates=saved_steps(run_dir)``), which is a different declared
rule, not a fallback. A chosen step without weights is an error naming the nearest saved
steps; no other step is ever substituted silently.
"""

from __future__ import annotations

import os

from ..runs.durable import install
from ..runs.metric_names import DEV_PASS1, ELAPSED_S, TOKENS_GENERATED_TOTAL
from ..runs.run_folder import CHECKPOINTS, METRICS, SNAPSHOTS, RunFolder, parse_step_dir, step_dir_name

RULES = ("best_dev", "final", "step", "rollout_tokens", "wall_clock")
_BUDGET_FIELD = {"rollout_tokens": TOKENS_GENERATED_TOTAL, "wall_clock": ELAPSED_S}


class CheckpointMissing(ValueError):
    """The selected step's weights were never saved or have been pruned."""


def run_metric_rows(run_dir: str) -> list[dict]:
    """The rows of ``run_dir/metrics.jsonl`` as :func:`sapo_lab.runs.run_folder.read_metrics` reads them
    (a torn last line left out; any other damaged line an error naming it)."""
    folder = RunFolder(run_dir)
    if not os.path.isfile(folder.metrics):
        raise ValueError(f"{run_dir} has no {METRICS}")
    return folder.read_metrics().rows


def select_step(rows: list[dict], by: str, value=None, *, candidates=None) -> dict:
    """``{"by", "value", "step", "dev_pass1", "total_tokens_generated", "elapsed_s", ...}`` for one rule.

    ``candidates``: optional collection of steps the rule may choose from (declared in
    advance, e.g. the steps that have weights).
    """
    if by not in RULES:
        raise ValueError(f"unknown selection rule {by!r}; rules: {RULES}")
    if by in ("best_dev", "final") and value is not None:
        raise ValueError(f"selection rule {by!r} takes no value, got {value!r}")
    if by not in ("best_dev", "final") and (value is None or isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"selection rule {by!r} needs a numeric value, got {value!r}")
    if not rows:
        raise ValueError("no metrics rows to select from")
    pool = rows if candidates is None else [r for r in rows if r["step"] in set(candidates)]
    if not pool:
        raise ValueError("none of the candidate steps was logged")
    extra = {}
    if by == "best_dev":
        measured = [r for r in pool if r.get(DEV_PASS1) is not None]
        if not measured:
            raise ValueError("no dev evaluation among the candidate steps")
        best = max(r[DEV_PASS1] for r in measured)
        row = next(r for r in measured if r[DEV_PASS1] == best)
    elif by == "final":
        row = pool[-1]
    elif by == "step":
        found = [r for r in pool if r["step"] == value]
        if not found:
            raise ValueError(f"step {value} is not among the logged (candidate) steps {pool[0]['step']}..{pool[-1]['step']}")
        row = found[0]
    else:
        field = _BUDGET_FIELD[by]
        within = [r for r in pool if r[field] <= value]
        if not within:
            raise ValueError(f"no step fits {by} <= {value}: the first candidate step already used {pool[0][field]}")
        row = within[-1]
        extra["ended_before_budget"] = rows[-1][field] <= value  # the whole run fit in the budget
    return {
        "by": by,
        "value": value,
        "step": row["step"],
        "dev_pass1": row.get(DEV_PASS1),
        "total_tokens_generated": row.get(TOKENS_GENERATED_TOTAL),
        "elapsed_s": row.get(ELAPSED_S),
        **extra,
    }


def saved_steps(run_dir: str) -> list[int]:
    """Steps that have weights on disk (trainer checkpoints or snapshots), sorted."""
    steps = set()
    for sub in (CHECKPOINTS, SNAPSHOTS):
        root = os.path.join(run_dir, sub)
        if os.path.isdir(root):
            for d in os.listdir(root):
                if parse_step_dir(d) is not None and os.path.isfile(os.path.join(root, d, "model.safetensors")):
                    steps.add(parse_step_dir(d))
    return sorted(steps)


def weights_for_step(run_dir: str, step: int) -> str:
    """Path of ``model.safetensors`` for ``step``; :class:`CheckpointMissing` if there is none."""
    for sub in (CHECKPOINTS, SNAPSHOTS):
        path = os.path.join(run_dir, sub, step_dir_name(step), "model.safetensors")
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


def checkpoint_by_rule(run_dir: str, by: str, value=None, *, saved_only: bool = False) -> dict:
    """``select_step`` on the run's metrics, plus ``weights``: the file holding that step's model.

    ``saved_only=True`` restricts the rule to steps with weights (declare it before looking).
    """
    rows = run_metric_rows(run_dir)
    choice = select_step(rows, by, value, candidates=saved_steps(run_dir) if saved_only else None)
    choice["weights"] = weights_for_step(run_dir, choice["step"])
    choice["saved_only"] = saved_only
    return choice


def save_snapshot(run_dir: str, step: int, model) -> str:
    """Write the model's weights to ``snapshots/step-NNNNNN/model.safetensors`` atomically."""
    from safetensors.torch import save_model

    final = os.path.join(RunFolder(run_dir).snapshots, step_dir_name(step))
    os.makedirs(final, exist_ok=True)
    tmp = os.path.join(final, f".model.safetensors.tmp-{os.getpid()}")
    save_model(model, tmp)
    install(tmp, os.path.join(final, "model.safetensors"))
    return final


def load_weights(run_dir: str, step: int, device: str = "cpu"):
    """(model, tokenizer) of ``run_dir`` at ``step``: the run's architecture and tokenizer, that step's weights."""
    from safetensors.torch import load_model

    from ..training.model import load_model_and_tokenizer

    path = weights_for_step(run_dir, step)
    model, tok = load_model_and_tokenizer(RunFolder(run_dir).cold_start)
    missing, unexpected = load_model(model, path, device=device)
    if missing or unexpected:
        raise ValueError(f"{path} does not match the run's model: missing {missing}, unexpected {unexpected}")
    return model.to(device).eval(), tok
