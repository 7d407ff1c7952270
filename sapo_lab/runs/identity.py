"""What makes two runs the same run: their configs, less the keys that only say where things are kept.

A study reuses a finished run, and pairs two methods' runs, only when this identity agrees;
the cold start's cache key hashes the same identity's ``cold_start`` section. Plain JSON in and
out, so reading results needs neither torch nor pydantic.
"""

from __future__ import annotations

import json

# Dotted keys that say where a run keeps something, not what it computes.
LOCATION_KEYS = ("cold_start.cache_dir",)


def run_identity(config: dict) -> dict:
    """``config`` (a ``config.json``, or ``TrainConfig.to_dict()``) as JSON values, without :data:`LOCATION_KEYS`."""
    out = json.loads(json.dumps(config))  # a deep copy; tuples become lists, as in config.json
    for key in LOCATION_KEYS:
        section, _, leaf = key.rpartition(".")
        out.get(section, {}).pop(leaf, None)
    return out


def same_run(saved: dict, requested: dict) -> bool:
    """True when two configs describe the same run (see :func:`run_identity`)."""
    return run_identity(saved) == run_identity(requested)
