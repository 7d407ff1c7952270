"""A study file (``experiments/NAME.json``), read and checked before anything runs::

    {
      "name": "main_comparison",            # results go to RESULTS_ROOT/NAME/
      "description": "what it asks, and its measured compute",
      "preset": "cpu-tiny",                  # as for load_config
      "base": {"rollout.max_completion_length": 5},        # overrides for every run
      "methods": {"sapo": {"loss_type": "sapo"}, "grpo": {"loss_type": "grpo"}},
      "seeds": [0, 1, 2],
      "grid": {"optimization.learning_rate": [1e-4, 3e-4]}, # optional; cartesian product
      "budget": {"max_steps": 60, "max_train_time_s": 0},   # the same for every run
      "collapse": [{"metric": "dev_pass1", "kind": "drop_from_best", "fraction": 0.5, "patience": 2}],
      "selection": [{"by": "best_dev"}, {"by": "final"}],   # checkpoints evaluated on eval
      "snapshot_every": "dev",               # weights kept at every dev step ("dev", N steps, or 0)
      "breakdown_samples": 4,                # samples per eval prompt for the per-family table
      "kernels": "avx2",                     # optional: CPU kernel setting (sapo_lab.runs.kernels), default native
      "analysis": {...}                      # optional: the primary endpoint, comparisons and test
    }

The ``analysis`` block declares how the study is read: ``declared`` ("before running", or
"post hoc" for a plan written after the results), ``declared_utc``, the primary ``endpoint``
(``metric``: a name of :mod:`sapo_lab.evidence.endpoints`' table, checked here; ``checkpoint``;
``evaluation``: the protocol in words), ``alpha``, the primary ``tests`` (each ``{"id", "question", "method", "reference",
"cell", "test", "family"?}``: ``method - reference`` at matched seeds in the grid ``cell``;
tests sharing a ``family`` are Holm-adjusted together), optional ``tuning`` arms (each
``{"id", "question", "arms": {NAME: [methods]}, "tune_on", "test"}``: per arm, the method
with the best seed-mean ``tune_on`` is chosen, then the chosen methods are compared paired
by seed on the endpoint), optional ``contrasts`` (a trend of the gap over a factor, or a tuning
arm over keys outside the loss section: :mod:`sapo_lab.evidence.contrasts`) and ``exploratory``
(what everything else is). Once a study has run
with an analysis block, the block is part of its declaration and cannot change; a study that
ran without one may gain a post hoc block.

Override keys are those of :func:`sapo_lab.runs.config.load_config` (dotted or unique leaf
names). A method or grid point may not set the budget or the seed (that would make the
comparison unequal), and a key may not be set by both a method and the grid
(:func:`sapo_lab.studies.expansion.expand_runs` checks those against the config tree).
The collapse criteria are described in :mod:`sapo_lab.studies.verdicts`.
"""

from __future__ import annotations

import re

from ..evidence.contrasts import check_contrasts
from ..evidence.endpoints import TESTS, check_name, endpoint_names
from ..runs.json_object import read_json_object
from ..runs.kernels import kernel_setting_env
from ..runs.metric_names import canonical
from .checkpoint_rules import RULES

STUDY_KEYS = {
    "name",
    "description",
    "preset",
    "base",
    "methods",
    "seeds",
    "grid",
    "budget",
    "collapse",
    "selection",
    "snapshot_every",
    "breakdown_samples",
    "analysis",
    "kernels",
}
ANALYSIS_KEYS = {"declared", "declared_utc", "endpoint", "alpha", "tests", "tuning", "contrasts", "exploratory"}
DECLARED = ("before running", "post hoc")
BUDGET_KEYS = {"max_steps": "optimization.max_steps", "max_train_time_s": "max_train_time_s"}
COLLAPSE_KINDS = ("drop_from_best", "below", "above")


def _check_keys(obj: dict, what: str, known: set, owner: str, required: tuple) -> None:
    """Refuse the first key of ``obj`` that is not ``known`` (a ``what`` key), then the first ``required`` one it lacks."""
    unknown = sorted(set(obj) - known)
    if unknown:
        raise ValueError(f"unknown {what} key {unknown[0]!r}; known: {sorted(known)}")
    for key in required:
        if key not in obj:
            raise ValueError(f"{owner} must declare {key!r}")


def load_declaration(path: str) -> dict:
    """The study declaration at ``path``, checked; unknown keys and bad values are one-line errors."""
    study = read_json_object(path, "study file")
    _check_keys(study, "study", STUDY_KEYS, f"study {path!r}", ("name", "methods", "seeds", "budget", "collapse"))
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(study["name"])):
        raise ValueError(f"study name {study['name']!r} must be letters, digits, '_', '.', '-'")
    study.setdefault("preset", "cpu-tiny")
    study.setdefault("base", {})
    study.setdefault("grid", {})
    study.setdefault("selection", [{"by": "best_dev"}, {"by": "final"}])
    study.setdefault("snapshot_every", "dev")
    study.setdefault("breakdown_samples", 4)
    if not isinstance(study["methods"], dict) or not study["methods"]:
        raise ValueError("study 'methods' must map method names to override objects")
    for m, ov in study["methods"].items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", m) or not isinstance(ov, dict):
            raise ValueError(f"method {m!r}: names are letters, digits, '_', '.', '-', and overrides an object")
    seeds = study["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"study 'seeds' must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"study 'seeds' repeats a seed: {seeds}")
    grid = study["grid"]
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ValueError("study 'grid' must map override keys to non-empty lists of values")
    budget = study["budget"]
    if not isinstance(budget, dict) or "max_steps" not in budget or set(budget) - set(BUDGET_KEYS):
        raise ValueError(f"study 'budget' must give max_steps (and optionally max_train_time_s), got {budget!r}")
    _check_collapse(study["collapse"])
    for rule in study["selection"]:
        if not isinstance(rule, dict) or rule.get("by") not in RULES or set(rule) - {"by", "value", "saved_only"}:
            raise ValueError(f"selection rule {rule!r} must be {{'by': one of {RULES}, 'value'?: number, 'saved_only'?: bool}}")
        needs_value = rule["by"] not in ("best_dev", "final")
        value = rule.get("value")
        if needs_value != (value is not None) or (needs_value and not isinstance(value, (int, float))):
            raise ValueError(f"selection rule {rule!r}: {'a numeric value is' if needs_value else 'no value is'} needed")
    snap = study["snapshot_every"]
    if snap != "dev" and not (isinstance(snap, int) and not isinstance(snap, bool) and snap >= 0):
        raise ValueError(f"snapshot_every must be 'dev' or an integer >= 0, got {snap!r}")
    if not isinstance(study["breakdown_samples"], int) or study["breakdown_samples"] < 0:
        raise ValueError("breakdown_samples must be an integer >= 0 (0 = no per-family evaluation)")
    if "kernels" in study:
        kernel_setting_env(study["kernels"])
    if "analysis" in study:
        _check_analysis(study["analysis"], study)
    return study


def _check_analysis(plan, study: dict) -> None:
    """The analysis block names known methods, one declared test, and says when it was declared."""
    if not isinstance(plan, dict):
        raise ValueError("study 'analysis' must be an object")
    _check_keys(plan, "analysis", ANALYSIS_KEYS, "study 'analysis'", ("declared", "declared_utc", "endpoint", "alpha", "tests"))
    if plan["declared"] not in DECLARED:
        raise ValueError(f"analysis 'declared' must be one of {DECLARED}, got {plan['declared']!r}")
    endpoint = plan["endpoint"]
    if not isinstance(endpoint, dict) or set(endpoint) != {"metric", "checkpoint", "evaluation"}:
        raise ValueError("analysis 'endpoint' must give exactly 'metric', 'checkpoint' and 'evaluation'")
    endpoints = endpoint_names(study["selection"])  # the names sapo_lab.evidence.endpoints allows this study
    check_name(endpoint["metric"], endpoints, "analysis endpoint metric")
    if not isinstance(plan["alpha"], float) or not 0 < plan["alpha"] < 1:
        raise ValueError(f"analysis 'alpha' must be a number in (0, 1), got {plan['alpha']!r}")
    methods = set(study["methods"])
    grid_leaves = {grid_leaf(k) for k in study.get("grid", {})} | set(study.get("grid", {}))
    ids = set()
    for t in plan["tests"]:
        if not isinstance(t, dict) or not {"id", "question", "method", "reference", "test"} <= set(t):
            raise ValueError(f"analysis test {t!r} needs 'id', 'question', 'method', 'reference' and 'test'")
        for side in ("method", "reference"):
            if t[side] not in methods:
                raise ValueError(f"analysis test {t['id']}: {side} {t[side]!r} is not a method of the study")
        check_name(t["test"], TESTS, f"analysis test {t['id']}: test")
        if set(t.get("cell", {})) - grid_leaves:
            raise ValueError(f"analysis test {t['id']}: cell key {sorted(set(t['cell']) - grid_leaves)[0]!r} is not a grid key")
        ids.add(t["id"])
    for arm in plan.get("tuning", []):
        if not isinstance(arm, dict) or not {"id", "question", "arms", "tune_on", "test"} <= set(arm):
            raise ValueError(f"analysis tuning {arm!r} needs 'id', 'question', 'arms', 'tune_on' and 'test'")
        if len(arm["arms"]) != 2 or len({len(v) for v in arm["arms"].values()}) != 1:
            raise ValueError(f"analysis tuning {arm['id']}: two arms with the same number of configurations")
        check_name(arm["tune_on"], endpoints, f"analysis tuning {arm['id']}: tune_on")
        check_name(arm["test"], TESTS, f"analysis tuning {arm['id']}: test")
        for name in (m for v in arm["arms"].values() for m in v):
            if name not in methods:
                raise ValueError(f"analysis tuning {arm['id']}: {name!r} is not a method of the study")
        ids.add(arm["id"])
    if len(ids) != len(plan["tests"]) + len(plan.get("tuning", [])):
        raise ValueError("analysis test and tuning ids must be unique")
    if "contrasts" in plan:  # trends and tuning outside the loss section: sapo_lab.evidence.contrasts
        check_contrasts(plan["contrasts"], study, ids)


def _check_collapse(criteria) -> None:
    if not isinstance(criteria, list) or not criteria:
        raise ValueError("study 'collapse' must be a non-empty list of criteria, declared before running")
    for c in criteria:
        if not isinstance(c, dict) or c.get("kind") not in COLLAPSE_KINDS or not isinstance(c.get("metric"), str):
            raise ValueError(f"collapse criterion {c!r} needs 'metric' and 'kind' in {COLLAPSE_KINDS}")
        allowed = {"metric", "kind", "patience"} | (
            {"fraction", "min_best"} if c["kind"] == "drop_from_best" else {"threshold"}
        )
        if set(c) - allowed:
            raise ValueError(f"collapse criterion {c!r}: unknown key {sorted(set(c) - allowed)[0]!r}")
        need = "fraction" if c["kind"] == "drop_from_best" else "threshold"
        if not isinstance(c.get(need), (int, float)):
            raise ValueError(f"collapse criterion {c!r} needs a numeric {need!r}")
        if not isinstance(c.get("patience", 1), int) or c.get("patience", 1) < 1:
            raise ValueError(f"collapse criterion {c!r}: patience must be an integer >= 1")
        canonical(c["metric"])  # a metric no row has would never fire


def grid_leaf(key: str) -> str:
    """A dotted override key's last part (``optimization.learning_rate`` -> ``learning_rate``): run ids and columns use it."""
    return key.rsplit(".", 1)[-1]
