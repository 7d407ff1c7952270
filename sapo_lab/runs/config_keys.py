"""The config keys a user may override, each with its default and its comment: what ``--help`` lists.

Read from the source of :mod:`sapo_lab.runs.config`, not by importing it: that module
imports the loss library (torch), and ``python -m sapo_lab train --help`` must answer before
torch loads. The tree is the one the dataclasses declare: a field whose default is
``field(default_factory=SomeConfig)`` is a section, every other field a key with a literal
default and the comment on its line (or the comment block just above it, for the few that
need more than a line). tests/test_cli_help.py checks the result against the imported tree.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import os
import textwrap
import tokenize
from dataclasses import dataclass

CONFIG_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config.py")
ROOT = "TrainConfig"
_FACTORY_DEFAULTS = {"dict": {}, "list": [], "tuple": ()}


@dataclass(frozen=True)
class ConfigKey:
    """One overridable key: ``key`` is dotted, ``alias`` its last part where that is unique."""

    key: str
    alias: str | None
    default: object
    comment: str


def _comments(source: str) -> tuple[dict[int, str], dict[int, str]]:
    """Line number -> comment text, for comments after code and for comment-only lines."""
    inline, whole = {}, {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            (whole if tok.line.strip().startswith("#") else inline)[tok.start[0]] = text
    return inline, whole


def _comment(line: int, inline: dict, whole: dict) -> str:
    if line in inline:
        return inline[line]
    block, above = [], line - 1
    while above in whole:
        block.insert(0, whole[above])
        above -= 1
    return " ".join(block)


def _section(value: ast.expr | None, classes: dict) -> str | None:
    """The class name of ``field(default_factory=SomeConfig)`` when SomeConfig is a class of the module."""
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == "default_factory" and isinstance(kw.value, ast.Name) and kw.value.id in classes:
                return kw.value.id
    return None


def _default(value: ast.expr | None, key: str):
    if isinstance(value, ast.Call):  # field(default=...) or field(default_factory=dict)
        for kw in value.keywords:
            if kw.arg == "default":
                return ast.literal_eval(kw.value)
            if kw.arg == "default_factory" and isinstance(kw.value, ast.Name) and kw.value.id in _FACTORY_DEFAULTS:
                return _FACTORY_DEFAULTS[kw.value.id]
    try:
        return ast.literal_eval(value)
    except ValueError:
        raise ValueError(f"config key {key!r}: its default is not a literal the help can show") from None


@functools.lru_cache(maxsize=4)
def config_keys(source_path: str = CONFIG_SOURCE) -> tuple[ConfigKey, ...]:
    """Every leaf key of the config tree in declaration order, with default, comment and unique-leaf alias."""
    with open(source_path) as f:
        source = f.read()
    tree = ast.parse(source)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    inline, whole = _comments(source)
    found = []

    def walk(cls: str, prefix: str) -> None:
        for stmt in classes[cls].body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            key = prefix + stmt.target.id
            section = _section(stmt.value, classes)
            if section:
                walk(section, key + ".")
            else:
                found.append((key, _default(stmt.value, key), _comment(stmt.lineno, inline, whole)))

    walk(ROOT, "")
    leaves = [k.rsplit(".", 1)[-1] for k, _, _ in found]
    return tuple(
        ConfigKey(k, leaf if leaves.count(leaf) == 1 and leaf != k else None, d, c)
        for (k, d, c), leaf in zip(found, leaves, strict=True)
    )


@functools.lru_cache(maxsize=4)
def preset_values(preset: str, source_path: str = CONFIG_SOURCE) -> dict:
    """The dotted keys a preset of ``PRESETS`` sets, with their values (``{}`` for an unknown name)."""
    with open(source_path) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "PRESETS":
            return _flatten(ast.literal_eval(node.value).get(preset, {}), {k.key for k in config_keys(source_path)})
    return {}


def _flatten(d: dict, leaves: set, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and prefix + k not in leaves:  # a section, not a mapping-valued key
            out.update(_flatten(v, leaves, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


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
