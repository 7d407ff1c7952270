"""A study's runs: every method x grid point x seed, each with its resolved, validated config."""

from __future__ import annotations

import itertools
import os

from ..evidence.results import value_tag
from ..runs.config import load_config, resolve_key
from ..runs.study_folder import StudyFolder
from .spec import BUDGET_KEYS, grid_leaf


def expand_runs(study: dict, results_root: str = "results") -> list[dict]:
    """Every run of the study, in a fixed order: ``{"run_id", "method", "seed", "grid", "overrides", "config"}``.

    Every config is resolved and validated here, before any run starts.
    """
    budget_keys = {resolve_key(k) for k in BUDGET_KEYS.values()} | {resolve_key("seed")}
    grid = study["grid"]
    grid_keys = [resolve_key(k) for k in grid]
    for m, ov in study["methods"].items():
        keys = {resolve_key(k) for k in ov}
        if keys & budget_keys:
            raise ValueError(f"method {m!r} sets {sorted(keys & budget_keys)[0]!r}: the budget and seeds are the study's")
        if keys & set(grid_keys):
            raise ValueError(f"method {m!r} and the grid both set {sorted(keys & set(grid_keys))[0]!r}")
    if set(grid_keys) & budget_keys:
        raise ValueError(f"the grid sets {sorted(set(grid_keys) & budget_keys)[0]!r}: the budget and seeds are the study's")
    base = dict(study["base"])
    if {resolve_key(k) for k in base} & budget_keys:
        raise ValueError(f"'base' sets {sorted({resolve_key(k) for k in base} & budget_keys)[0]!r}: use 'budget' and 'seeds'")
    if not any(resolve_key(k) == "cold_start.cache_dir" for k in base):  # one cold start per seed, shared by the methods
        base["cold_start.cache_dir"] = StudyFolder(os.path.join(results_root, study["name"])).cold_start_cache
    runs = []
    for method, ov in study["methods"].items():
        for point in itertools.product(*grid.values()) if grid else [()]:
            g = dict(zip(grid, point, strict=True))
            for seed in study["seeds"]:
                # max_train_time_s is always set: a preset's wall-clock guard must not cut runs unannounced
                budget = {BUDGET_KEYS[k]: v for k, v in {"max_train_time_s": 0, **study["budget"]}.items()}
                overrides = {**base, **ov, **g, **budget, "seed": seed}
                label = "".join(f"_{grid_leaf(k)}={value_tag(v)}" for k, v in g.items())
                runs.append(
                    {
                        "run_id": f"{method}{label}_seed{seed}",
                        "method": method,
                        "seed": seed,
                        "grid": g,
                        "overrides": overrides,
                        "config": load_config(study["preset"], overrides),
                    }
                )
    return runs

