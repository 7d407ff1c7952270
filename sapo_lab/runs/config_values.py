"""The value types of the config tree, and the one-line message for a value pydantic refuses.

pydantic coerces what a user types (``--learning_rate 1e-3``, ``--greedy true``) and checks
each bound. The types here add what its lax mode does not do the way a command line needs:
a bool is not a number, ``none``/``null`` typed for an optional key means None, a list may
be typed as ``1,4``, and a mapping as JSON text.
"""

from __future__ import annotations

import json
import math
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator


class WrongType(ValueError):
    """A value of the wrong kind (a bool for a number, text that is not JSON): reported as "must be ..., got ..."."""


class RuleBroken(ValueError):
    """A rule relating several keys, broken; ``key`` is the key it names, relative to its section."""

    def __init__(self, key: str, value, rule: str):
        super().__init__(rule)
        self.key, self.value, self.rule = key, value, rule


def _refuse_bool(rule: str):
    def check(value):
        if isinstance(value, bool):  # pydantic's lax mode reads True as 1
            raise WrongType(rule)
        return value

    return BeforeValidator(check)


def _none_text(value):
    return None if isinstance(value, str) and value.lower() in ("none", "null") else value


def _list_text(value):
    return [v for v in value.replace(",", " ").split() if v] if isinstance(value, str) else value


def _json_text(value):
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise WrongType("must be a JSON object") from None


def _finite_number(value):
    """A bool refused (lax mode reads True as 1.0) and inf/nan refused, in one validator that runs before any bound
    (a bound's message would misname NaN), so that every pydantic version says the same."""
    if isinstance(value, bool):
        raise WrongType("must be a number")
    if not isinstance(value, (int, float, str)):
        return value
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return value  # not a number at all: the float schema says so
    if not math.isfinite(number):  # inf or nan would be written as Infinity/NaN, which JSON does not allow
        raise ValueError("must be a finite number")
    return value


Int = Annotated[int, _refuse_bool("must be an integer")]
Float = Annotated[float, BeforeValidator(_finite_number)]
IntList = Annotated[tuple[Int, ...], BeforeValidator(_list_text)]  # "1,4" or "1 4" on the command line
Mapping = Annotated[dict, BeforeValidator(_json_text)]  # a JSON object, or its text


def nullable(tp):
    """``tp`` or None; the text ``none``/``null`` (any case) reads as None."""
    return Annotated[tp | None, BeforeValidator(_none_text)]


def one_of(choices) -> AfterValidator:
    """Refuse a value that is not in ``choices`` (a tuple, or a function returning one, called when a value is checked)."""

    def check(value):
        allowed = tuple(choices() if callable(choices) else choices)
        if value not in allowed:
            raise ValueError(f"must be one of {allowed}")
        return value

    return AfterValidator(check)


_TYPE_RULES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a mapping",
    "tuple_type": "must be a list",
}
_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"),
           "less_than_equal": ("le", "<=")}


def one_line(error: dict, known_keys) -> str:
    """The message for the first error of a ``ValidationError`` (``errors()``), naming the dotted key.

    ``known_keys(section)`` lists the keys a section (a tuple of names) accepts.
    """
    loc = tuple(p for p in error["loc"] if isinstance(p, str))  # a list item's index is not part of the key
    key, kind, value = ".".join(loc), error["type"], error["input"]
    cause = error.get("ctx", {}).get("error")
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"unknown config key {key!r}; known keys here: {sorted(known_keys(loc[:-1]))}"
    if kind in ("dataclass_type", "dataclass_exact_type"):
        return f"config section {key or '<root>'!r} must be a mapping, got {value!r}"
    if isinstance(cause, RuleBroken):
        return f"config key {'.'.join((*loc, cause.key))!r} = {cause.value!r} is invalid: {cause.rule}"
    if kind in _TYPE_RULES:
        return f"config key {key!r} cannot be null" if value is None else f"config key {key!r} {_TYPE_RULES[kind]}, got {value!r}"
    if kind in _BOUNDS:
        name, sign = _BOUNDS[kind]
        return f"config key {key!r} = {value!r} is invalid: must be {sign} {error['ctx'][name]:g}"
    if isinstance(cause, WrongType):
        return f"config key {key!r} {cause}, got {value!r}"
    return f"config key {key!r} = {value!r} is invalid: {cause if cause is not None else error['msg']}"
