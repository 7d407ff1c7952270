"""Collapse verdicts: whether, and at which step, a run collapsed by its study's declared criteria.

Collapse criteria (written before running; a run collapses when any fires; divergence
always counts as collapse), each over the rows where ``metric`` is not null:

* ``drop_from_best``: ``metric < fraction * (best so far)`` for ``patience`` consecutive
  measurements, counted only once the best so far is at least ``min_best`` (default 0);
* ``below`` / ``above``: ``metric < threshold`` (``> threshold``) for ``patience``
  consecutive measurements.

The step reported is the measurement at which the criterion fired.
"""

from __future__ import annotations

from ..runs.metric_names import canonical


def collapse_verdict(rows: list[dict], criteria: list[dict], diverged_at: int | None = None) -> dict:
    """``{"collapsed", "step", "criterion", "reason"}``: the earliest criterion to fire.

    A criterion's ``metric`` is a row key or a name from before the namespaces (see
    :func:`sapo_lab.runs.metric_names.canonical`); the reason quotes it as declared.
    """
    fired = []
    for i, c in enumerate(criteria):
        patience, run, best, key = c.get("patience", 1), 0, None, canonical(c["metric"])
        if rows and not any(key in r for r in rows):
            raise ValueError(f"collapse criterion {i} names {c['metric']!r}, which no metrics row has")
        for r in rows:
            v = r.get(key)
            if v is None:
                continue
            if c["kind"] == "drop_from_best":
                best = v if best is None else max(best, v)
                bad = best >= c.get("min_best", 0.0) and v < c["fraction"] * best
            elif c["kind"] == "below":
                bad = v < c["threshold"]
            else:
                bad = v > c["threshold"]
            run = run + 1 if bad else 0
            if run >= patience:
                fired.append((r["step"], i, f"{c['metric']} {c['kind']} for {patience} measurement(s)"))
                break
    if diverged_at is not None:
        fired.append((diverged_at, None, "training diverged (NaN/inf)"))
    if not fired:
        return {"collapsed": False, "step": None, "criterion": None, "reason": None}
    step, i, why = min(fired, key=lambda f: f[0])
    return {"collapsed": True, "step": step, "criterion": i, "reason": why}

