"""Declared contrasts that one method against one reference cannot express.

A study's ``analysis`` block (:mod:`sapo_lab.studies.spec`) may list ``contrasts`` beside its
``tests`` and ``tuning`` arms. Each is ``{"id", "question", "kind", "test", "family"?}`` plus:

* ``kind: "trend"``: ``points``, a list of ``{"method", "reference", "x"}`` (three or more, distinct
  ``x``). Per seed, the paired gap ``method - reference`` at each point is regressed on ``x`` by
  least squares; the per-seed slopes are tested against 0 with a one-sample t-test. The slope is
  how much the gap moves per unit of ``x`` (e.g. per doubling of the staleness, with ``x = log2 M``),
  and because each seed's slope uses only that seed's runs, whatever a seed shares cancels.
* ``kind: "tuned"``: ``arms`` (two, with the same number of methods each), ``tune_on`` and
  ``differ_in``, the config keys the arms' settings may differ in outside the loss section (a
  learning rate). Per arm, the method with the best seed-mean ``tune_on`` is chosen (ties: the
  first declared); the two chosen methods are then compared paired by seed on the endpoint. A
  :mod:`~sapo_lab.evidence.analysis` tuning arm pairs runs only when everything but the loss agrees,
  so it cannot tune a learning rate; this one pairs runs that agree in everything but the loss and
  ``differ_in`` (the seed, so the cold start and data order, stay matched).

:func:`contrast_results` computes them in declaration order, with nothing computed until every
declared seed has finished; :func:`declared_results` is the study's whole declared analysis.
Contrasts sharing a ``family`` are Holm-adjusted together (a family may not also hold ``tests``).
"""

from __future__ import annotations

import copy
import math

from .analysis import (
    adjust_families,
    choose_tuned,
    endpoint_value,
    pairing_key,
    pairs_in_study,
    primary_results,
    run_config,
)
from .endpoints import TESTS, check_name, endpoint_names
from .paired import compare
from .results import Study

KINDS = ("trend", "tuned")


def check_contrasts(contrasts, study: dict, taken_ids: set) -> None:
    """One-line errors for a ``contrasts`` list that names unknown methods, too few points, or repeats an id."""
    if not isinstance(contrasts, list):
        raise ValueError("analysis 'contrasts' must be a list")
    methods = set(study["methods"])
    test_families = {t.get("family") for t in study["analysis"].get("tests", [])} - {None}
    ids = set(taken_ids)
    for c in contrasts:
        if not isinstance(c, dict) or not {"id", "question", "kind", "test"} <= set(c):
            raise ValueError(f"analysis contrast {c!r} needs 'id', 'question', 'kind' and 'test'")
        where = f"analysis contrast {c['id']}"
        if c["kind"] not in KINDS:
            raise ValueError(f"{where}: kind must be one of {KINDS}, got {c['kind']!r}")
        check_name(c["test"], TESTS, f"{where}: test")
        if c.get("family") is not None and c["family"] in test_families:
            raise ValueError(f"{where}: family {c['family']!r} is also a family of 'tests'; Holm runs within one list")
        if c["id"] in ids:
            raise ValueError(f"analysis ids must be unique: {c['id']!r} repeats")
        ids.add(c["id"])
        if c["kind"] == "trend":
            points = c.get("points")
            if not isinstance(points, list) or len(points) < 3:
                raise ValueError(f"{where}: a trend needs 'points', three or more {{'method', 'reference', 'x'}}")
            for p in points:
                if not isinstance(p, dict) or set(p) != {"method", "reference", "x"}:
                    raise ValueError(f"{where}: point {p!r} must give exactly 'method', 'reference' and 'x'")
                if not isinstance(p["x"], (int, float)) or isinstance(p["x"], bool) or not math.isfinite(p["x"]):
                    raise ValueError(f"{where}: point x must be a finite number, got {p['x']!r}")
            if len({p["x"] for p in points}) != len(points):
                raise ValueError(f"{where}: the points' x values must be distinct")
            names = [n for p in points for n in (p["method"], p["reference"])]
        else:
            arms = c.get("arms")
            if not isinstance(arms, dict) or len(arms) != 2 or len({len(v) for v in arms.values()}) != 1:
                raise ValueError(f"{where}: two arms with the same number of methods")
            if not isinstance(c.get("tune_on"), str):
                raise ValueError(f"{where}: 'tune_on' must name the column the settings are chosen on")
            check_name(c["tune_on"], endpoint_names(study["selection"]), f"{where}: tune_on")
            differ = c.get("differ_in")
            if not isinstance(differ, list) or not all(isinstance(k, str) and "." in k for k in differ):
                raise ValueError(f"{where}: 'differ_in' must list dotted config keys (e.g. 'optimization.learning_rate')")
            names = [n for v in arms.values() for n in v]
        for name in names:
            if name not in methods:
                raise ValueError(f"{where}: {name!r} is not a method of the study")


def _without(config: dict, dotted_keys) -> dict:
    out = copy.deepcopy(config)
    for key in dotted_keys:
        *path, leaf = key.split(".")
        node = out
        for part in path:
            node = node.get(part, {})
        node.pop(leaf, None)
    return out


def pairs_by_seed_ignoring(study: Study, method: str, reference: str, differ_in) -> dict:
    """``{seed: (method_run, reference_run)}`` for runs that agree in everything but the loss and ``differ_in``."""
    refs = {}
    for ref in study.select(reference):
        refs.setdefault(ref.seed, []).append(ref)
    out = {}
    for run in study.select(method):
        key = pairing_key(_without(run_config(run), differ_in))
        for ref in refs.get(run.seed, []):
            if pairing_key(_without(run_config(ref), differ_in)) == key:
                out[run.seed] = (run, ref)
    return out


def trend_slopes(gaps: dict, xs: list[float]) -> dict:
    """Per seed, the least-squares slope of ``gaps[seed]`` (one gap per ``xs`` entry) on ``xs``."""
    mean_x = sum(xs) / len(xs)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a trend needs x values that are not all equal")
    return {seed: sum((x - mean_x) * g for x, g in zip(xs, values, strict=True)) / sxx for seed, values in gaps.items()}


def _trend(study: Study, c: dict, metric: str, alpha: float, declared: int) -> dict:
    per_point = []
    for p in c["points"]:
        pairs = {pr.seed: pr for pr in pairs_in_study(study, p["method"], p["reference"])}
        if len(pairs) < declared:
            return {"status": f"pending: {len(pairs)} of {declared} pairs finished at x = {p['x']}"}
        per_point.append({s: pr.difference(metric) for s, pr in pairs.items()})
    seeds = sorted(set.intersection(*(set(d) for d in per_point)))
    xs = [float(p["x"]) for p in c["points"]]
    slopes = trend_slopes({s: [d[s] for d in per_point] for s in seeds}, xs)
    cmp = compare({s: (v, 0.0) for s, v in slopes.items()}, "slope", "0", alpha)
    gaps = [{"x": x, "mean_gap": sum(d.values()) / len(d)} for x, d in zip(xs, per_point, strict=True)]
    return {"status": "complete", "comparison": cmp, "p": cmp.t_p, "gaps": gaps}


def _tuned(study: Study, c: dict, metric: str, alpha: float, declared: int) -> dict:
    chosen, missing = choose_tuned(study, c["arms"], c["tune_on"], declared)
    if missing:
        return {"chosen": chosen, "status": f"pending: {missing} runs of the arms unfinished"}
    first, second = (chosen[a] for a in c["arms"])
    pairs = pairs_by_seed_ignoring(study, first, second, c["differ_in"])
    if len(pairs) < declared:
        return {"chosen": chosen, "status": f"pending: {len(pairs)} of {declared} pairs finished"}
    values = {s: (endpoint_value(a, metric), endpoint_value(b, metric)) for s, (a, b) in pairs.items()}
    cmp = compare(values, first, second, alpha)
    return {"chosen": chosen, "status": "complete", "comparison": cmp, "p": cmp.t_p}


def tuned_contrast(study: Study, contrast: dict, metric: str | None = None) -> dict:
    """A ``tuned`` contrast computed on ``study``'s runs (``chosen``, ``status``, ``comparison``, ``p``).

    ``contrast`` may be a declared one or one with its arms moved (the same rule at another M);
    ``metric`` is the endpoint compared (default: the declared one), the choice is always on ``tune_on``.
    """
    plan = study.declaration["analysis"]
    return _tuned(study, contrast, metric or plan["endpoint"]["metric"], plan["alpha"], len(study.declaration["seeds"]))


def contrast_results(study: Study) -> list[dict]:
    """The study's declared contrasts, in order: each with ``status``, ``comparison``, ``p``, ``p_adjusted``, ``reject``."""
    plan = study.declaration.get("analysis") or {}
    metric, alpha = plan["endpoint"]["metric"], plan["alpha"]
    declared = len(study.declaration["seeds"])
    results = []
    for c in plan.get("contrasts", []):
        compute = _trend if c["kind"] == "trend" else _tuned
        results.append({**c, "comparison": None, "p": None, **compute(study, c, metric, alpha, declared)})
    adjust_families(results, alpha)
    return results


def declared_results(study: Study) -> list[dict]:
    """Every declared question of the study: the primary tests and tuning arms, then the contrasts."""
    return primary_results(study) + contrast_results(study)
