"""Which checkpoint to report: best dev score, fixed step, fixed rollout tokens, or a wall-clock budget.

The rules alone, with the standard library: loading the chosen weights is
:func:`sapo_lab.studies.selected_eval.load_weights`'s.

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
:func:`sapo_lab.runs.snapshots.save_snapshot`, e.g. by the study runner at every dev evaluation);
:mod:`sapo_lab.runs.snapshots` says which steps have weights and where. Selection is
exact only if the chosen step has weights: for ``best_dev`` a snapshot at every dev
step; for budgets, a snapshot at every step, or a rule restricted in advance to the steps
that have weights (``candidates=saved_steps(run_dir)``, :func:`sapo_lab.runs.snapshots.saved_steps`),
which is a different declared rule, not a fallback. A chosen step without weights is an error naming the nearest saved
steps; no other step is ever substituted silently.
"""

from __future__ import annotations

from ..runs.metric_names import DEV_PASS1, ELAPSED_S, TOKENS_GENERATED_TOTAL
from ..runs.snapshots import run_metric_rows, saved_steps, weights_for_step

RULES = ("best_dev", "final", "step", "rollout_tokens", "wall_clock")
_BUDGET_FIELD = {"rollout_tokens": TOKENS_GENERATED_TOTAL, "wall_clock": ELAPSED_S}


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


def checkpoint_by_rule(run_dir: str, by: str, value=None, *, saved_only: bool = False) -> dict:
    """``select_step`` on the run's metrics, plus ``weights``: the file holding that step's model.

    ``saved_only=True`` restricts the rule to steps with weights (declare it before looking).
    """
    rows = run_metric_rows(run_dir)
    choice = select_step(rows, by, value, candidates=saved_steps(run_dir) if saved_only else None)
    choice["weights"] = weights_for_step(run_dir, choice["step"])
    choice["saved_only"] = saved_only
    return choice
