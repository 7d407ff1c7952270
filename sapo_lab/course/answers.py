"""Answer digests: an exercise check compares a student's value with a digest, never with a literal.

A literal in a check cell is an answer to copy; a digest of the rounded value is not. Values are rounded
to ``digits`` decimals before hashing, so any correct computation in double precision matches; choose
``digits`` so that the true value is not within rounding error of a rounding boundary.
"""

from __future__ import annotations

import hashlib
import json
import math


def _canonical(value, digits: int):
    if hasattr(value, "tolist"):  # torch tensors and numpy arrays
        value = value.tolist()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        text = f"{value:.{digits}f}"
        return "0." + "0" * digits if float(text) == 0 else text  # no "-0.000"
    if isinstance(value, dict):
        return {str(k): _canonical(v, digits) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, digits) for v in value]
    raise TypeError(f"cannot digest a {type(value).__name__}")


def answer_digest(value, digits: int = 4) -> str:
    """The first 16 hex digits of the SHA-256 of ``value`` rounded to ``digits`` decimals (nested lists,
    tuples, dicts, tensors and arrays included)."""
    text = json.dumps(_canonical(value, digits), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def matches(value, digest: str, digits: int = 4) -> bool:
    """True when ``value`` rounds to the answer whose digest is ``digest``; an un-digestible value is False."""
    try:
        return answer_digest(value, digits) == digest
    except TypeError:
        return False
