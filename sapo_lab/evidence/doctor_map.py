"""What the book's committed gate map found nearest a run's regime (``python -m sapo_lab doctor``'s closing lines).

The doctor (:mod:`sapo_lab.runs.doctor`) reads a run's gate activity: the median share of the
importance-weighted signal the gate removed. The nearest cell of the gate map
(:mod:`sapo_lab.evidence.gate_map`, ``results/gate_map``) is the SAPO setting whose own runs showed
the closest activity, on a log scale; the activity of a cell is the median over the steps of its
first finished seed's run (one run a cell keeps the doctor fast; the cell's paired gap is over all
its seeds). Matching by what the gate did, not by the settings, lets a run on another model, task
or framework be placed at all; the scope line says how far the map reaches.
"""

from __future__ import annotations

import math
import statistics

from .confirmatory import interval_text
from .gate_map import STUDY, Cell, map_cells, method_settings
from .results import Study, load_study

SIGNAL_REMOVED = "losses/signal_removed_frac"
ACTIVITY_FLOOR = 1e-6  # shares below this are compared as this on the log scale (an on-policy run's 0 included)
VERDICT_WORDS = {"helps": "SAPO above GRPO", "hurts": "SAPO below GRPO", "no difference": "no difference detected"}


def cell_activity(study: Study, method: str) -> float | None:
    """The median share of signal removed over the steps of ``method``'s first finished run; None without one."""
    runs = study.select(method)
    if not runs:
        return None
    _, values = runs[0].series(SIGNAL_REMOVED)
    return statistics.median(values) if values else None


def _log_distance(a: float, b: float) -> float:
    return abs(math.log10(max(a, ACTIVITY_FLOOR)) - math.log10(max(b, ACTIVITY_FLOOR)))


def nearest_cell(study: Study, activity: float) -> tuple[Cell, float, tuple[float, float]] | None:
    """The complete map cell whose SAPO runs removed the share of signal closest to ``activity``, its share, and
    the range of the cells' shares."""
    settings = method_settings(study)
    grpo = {(s.learning_rate, s.staleness): s for s in settings.values() if s.loss_type == "grpo"}
    candidates = []
    for s in settings.values():
        ref = grpo.get((s.learning_rate, s.staleness))
        share = cell_activity(study, s.method) if s.loss_type == "sapo" and ref is not None else None
        if share is not None:
            candidates.append((_log_distance(share, activity), s, ref, share))
    for _, s, ref, share in sorted(candidates, key=lambda c: c[0]):
        cell = map_cells(study, {s.method: s, ref.method: ref})[0]
        if cell.comparison is not None:  # the nearest complete cell
            return cell, share, (min(c[3] for c in candidates), max(c[3] for c in candidates))
    return None


def scope_line(study: Study) -> str:
    """What the map covers, from its declaration and its runs' configs: model, task, steps, seeds, the factors."""
    settings = method_settings(study)
    first = study.runs[0].config if study.runs else {}
    sapo = [s for s in settings.values() if s.loss_type == "sapo"]

    def values(attr):
        return ", ".join(f"{v:g}" for v in sorted({getattr(s, attr) for s in sapo}))

    what = (f"{first['model']['name_or_path']} GPT-2 on {first['task']['name']}, "
            f"{first['optimization']['max_steps']} rollout steps" if first else "no finished run")
    return (f"scope: the gate map (results/{study.name}, chapter 15b): {what}, {len(study.declaration['seeds'])} "
            f"paired seeds a cell; SAPO at τ+ {{{values('tau_pos')}}}, lr {{{values('learning_rate')}}}, "
            f"M {{{values('staleness')}}} against GRPO's clip at the same lr and M. A cell is read alone, "
            "unadjusted (the declared questions are the confirmatory reading), and a toy's cell is a pointer for "
            "another model or task, not a prediction")


def map_lines(regime: str, activity: float | None, study: Study | None = None) -> list[str]:
    """The doctor's closing lines: the nearest cell and its paired gap (or why none is matched), then the scope."""
    study = study if study is not None else load_study(STUDY)
    settings = method_settings(study)
    smallest_m = min((s.staleness for s in settings.values()), default=None)
    if regime == "on-policy":
        head = (f"gate map: no cell is on-policy (its smallest M is {smallest_m}); on-policy, SAPO's update is "
                "GRPO's by construction, so the map's SAPO − GRPO gaps do not apply")
    elif activity is None:
        head = "gate map: no cell matched (this run's log shows no share of signal removed to compare)"
    else:
        found = nearest_cell(study, activity)
        if found is None:
            head = "gate map: no complete cell yet"
        else:
            cell, share, (lowest, highest) = found
            level = 1 - study.declaration["analysis"]["alpha"]
            outside = "" if lowest <= activity <= highest else (
                f"; this run's share lies outside the map's cells ({lowest:.2%} to {highest:.2%}): the nearest is "
                "the map's edge, and the map says nothing beyond it")
            s, cmp = cell.sapo, cell.comparison
            kind = "a declared question's cell" if cell.in_declared_question else "an exploratory cell"
            head = (f"gate map, nearest cell by the share of signal the gate removed (there {share:.2%} on its first "
                    f"seed, here {activity:.2%}): SAPO τ+ {s.tau_pos:g}, lr {s.learning_rate:g}, M = {s.staleness} "
                    f"({kind}): SAPO − GRPO in final Pass@1 = {interval_text(cmp)} ({level:.0%} t interval, "
                    f"{len(cmp.seeds)} paired seeds), {VERDICT_WORDS[cell.verdict]}{outside}")
    return [head, scope_line(study)]
