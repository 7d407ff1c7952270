"""SAPO's gate half-width in closed form, with the standard library alone.

The objective (:mod:`sapo_lab.objective.kernels`, whose Gaussian kernel is matched to it) and the
evidence (the findings that place a temperature beside GRPO's clip) both state this number, and
the evidence loads no torch, so it lives in a leaf every layer may import.
"""

from __future__ import annotations

import math

# |r - 1| at which SAPO's gate sech^2(tau (r-1)/2) equals 1/2, times tau: 2 acosh(sqrt 2) = 2 asinh(1).
SAPO_HALF_WIDTH_TIMES_TAU = 2.0 * math.asinh(1.0)


def sapo_half_width(tau: float) -> float:
    """Half-width at half maximum of SAPO's gate: the |r - 1| where w_tau(r) = 1/2."""
    try:
        value = float(tau)
    except (TypeError, ValueError):
        raise ValueError(f"temperature tau must be a finite number > 0, got {tau!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"temperature tau must be finite and > 0, got {tau!r}")
    return SAPO_HALF_WIDTH_TIMES_TAU / value
