"""The config keys a user may override, each with its default and its description: what ``--help`` lists.

Read from the config tree itself (:class:`sapo_lab.runs.config.TrainConfig`): a field whose type is
a dataclass is a section, every other field a key, with the default and the ``description`` its
``Field`` declares. Importing the tree loads pydantic but not torch, so ``python -m sapo_lab train
--help`` answers before torch loads. tests/cli/test_cli_help.py checks the help against the tree.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import textwrap
import typing
from dataclasses import dataclass

from .config_paths import TASK_OPTIONS, flatten_config, task_option_name


@dataclass(frozen=True)
class ConfigKey:
    """One overridable key: ``key`` is dotted, ``alias`` its last part where that is unique."""

    key: str
    alias: str | None
    default: object
    comment: str


def _leaves(cls, prefix: str = "") -> list[tuple[str, object, str]]:
    """``(dotted key, default, description)`` of every leaf field under ``cls``, in declaration order."""
    found = []
    hints = typing.get_type_hints(cls)
    for name, info in cls.__pydantic_fields__.items():
        if dataclasses.is_dataclass(hints[name]):
            found += _leaves(hints[name], f"{prefix}{name}.")
            continue
        if not info.description:
            raise ValueError(f"config key {prefix}{name!s} has no description for the help")
        default = info.default_factory() if info.default_factory is not None else info.default
        found.append((prefix + name, default, " ".join(info.description.split())))
    return found


@functools.lru_cache(maxsize=4)
def config_keys(tree=None) -> tuple[ConfigKey, ...]:
    """Every leaf key of the config tree (default: ``TrainConfig``) in declaration order, with default,
    description and unique-leaf alias."""
    if tree is None:
        from .config import TrainConfig as tree
    found = _leaves(tree)
    leaves = [k.rsplit(".", 1)[-1] for k, _, _ in found]
    return tuple(
        ConfigKey(k, leaf if leaves.count(leaf) == 1 and leaf != k else None, d, c)
        for (k, d, c), leaf in zip(found, leaves, strict=True)
    )


def preset_names() -> list[str]:
    """The presets ``--config`` accepts by name, in declaration order."""
    from .config import PRESETS

    return list(PRESETS)


def preset_values(preset: str) -> dict:
    """The keys a preset of ``PRESETS`` sets, with their values (``{}`` for an unknown name); task options
    are gathered back under ``task.options``, the key ``--help`` lists."""
    from .config import PRESETS

    flat = flatten_config(PRESETS.get(preset, {}))
    options = {task_option_name(k): v for k, v in flat.items() if task_option_name(k)}
    out = {k: v for k, v in flat.items() if not task_option_name(k)}
    return {**out, TASK_OPTIONS: options} if options else out


def as_typed(value) -> str:
    """A value as one types it after ``--KEY`` (``None`` -> ``none``, ``(1, 4)`` -> ``1,4``, a dict as JSON)."""
    if value is None:
        return "none"
    if value == "":
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(as_typed(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def config_keys_help(preset: str, width: int = 100) -> str:
    """The help section listing every key: flag(s), default (and ``preset``'s value where it differs), comment."""
    preset_set = preset_values(preset)
    lines = [
        f"config keys: --KEY VALUE (or --KEY=VALUE) overrides a key of --config (default {preset});",
        "KEY is dotted or, where unique, its last part; --task.options.NAME VALUE sets one task option.",
        "",
    ]
    for k in config_keys():
        flags = f"--{k.key}" + (f", --{k.alias}" if k.alias else "")
        default = f"default {as_typed(k.default)}"
        if k.key in preset_set and preset_set[k.key] != k.default:
            default += f"; {preset}: {as_typed(preset_set[k.key])}"
        lines.append(f"  {flags}  ({default})")
        lines += textwrap.wrap(k.comment, width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)
