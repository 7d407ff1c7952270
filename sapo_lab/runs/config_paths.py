"""How config keys are spelled: the one flattening of a config dict into dotted keys, and task options.

Loading (``runs.config``), ``--help`` (``runs.config_keys``), the resume policy (``runs.run_policy``) and
studies read keys through these two functions, so a key is spelled the same wherever it is typed, saved
or compared. Standard library only.
"""

from __future__ import annotations

TASK_OPTIONS = "task.options"


def flatten_config(data: dict, prefix: str = "") -> dict:
    """A config dict (a preset, a JSON file, ``config.json``) as ``{dotted key: value}``.

    The one place config keys are flattened: loading, ``--help``, the resume policy and studies read
    keys through it. Every section is opened, and so is ``task.options``: each task option is its own
    key, ``task.options.NAME``, the name ``--task.options.NAME VALUE`` sets and a refusal names.
    """
    out = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(flatten_config(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def task_option_name(key: str) -> str | None:
    """``NAME`` of a ``task.options.NAME`` key (dashes read as underscores), else ``None``."""
    key = key.replace("-", "_")
    head = TASK_OPTIONS + "."
    return key[len(head):] if key.startswith(head) and len(key) > len(head) else None
