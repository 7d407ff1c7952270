"""Absolute anchors for the tolerances the audit's other per-dtype tests read from TOLERANCES itself
(test_conformance_tolerances.py brackets each dtype's entry with that entry): float64's finite-difference and
temperature tolerances, and the 16-bit temperature tolerance, each held to a mistake size stated here.

The loss is written here from the paper: -(4/tau) sigmoid(tau (r - 1)) A, a per-response mean; ``grad_scale``
scales its gradient alone and ``tau_neg_factor`` the temperature it uses for A <= 0.
"""

from __future__ import annotations

import pytest
import torch

from sapo_lab.conformance import FINITE_DIFFERENCES, ON_POLICY, TEMPERATURE_NEG, audit

TAU_POS, TAU_NEG = 1.0, 1.05


def sapo(grad_scale: float = 1.0, tau_neg_factor: float = 1.0):
    def loss(logp, old_logp, advantages, mask):
        tau = torch.full_like(advantages, TAU_NEG * tau_neg_factor).masked_fill(advantages > 0, TAU_POS)[:, None]
        token = -(4 / tau) * torch.sigmoid(tau * (torch.exp(logp - old_logp) - 1)) * advantages[:, None]
        m = mask.to(logp.dtype)
        n = m.sum(-1)
        keep = n > 0
        if not bool(keep.any()):
            return (token * m).sum()
        value = ((token * m).sum(-1)[keep] / n[keep]).mean()
        return value + (grad_scale - 1.0) * (value - value.detach())

    return loss


def test_the_plain_loss_conforms_in_float64():
    card = audit(sapo(), dtype="float64")
    assert card.passed, [r.line() for r in card.differences()]


def test_float64_resolves_a_value_derivative_off_by_a_hundred_thousandth():
    """A step of 2^-17 leaves truncation and rounding near 1e-11: a gradient 1e-5 away from the value's
    derivative is six orders above that. Catches float64's finite-difference tolerance loosened tenfold or more."""
    assert audit(sapo(grad_scale=1 + 1e-5), dtype="float64").row(FINITE_DIFFERENCES).verdict == "differs"


def test_float64_resolves_a_temperature_off_by_one_in_ten_million():
    """float64 gradients pin tau to ~1e-12; a tau_neg off by 1e-7 (relative) is a real, if tiny, mistake (a
    constant rounded to float32 is off by ~3e-8). Catches float64's temperature tolerance loosened a thousandfold."""
    row = audit(sapo(tau_neg_factor=1 + 1e-7), dtype="float64").row(TEMPERATURE_NEG)
    assert row.verdict == "differs", row.measured


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sixteen_bits_resolve_a_temperature_off_by_a_fifth(dtype):
    """tau_neg = 1.26 for 1.05: 16-bit gradients carry ~1 % error, so tau is known to a few %; 20 % must show.
    Catches a 16-bit temperature tolerance loosened to 40 % (bfloat16's twentyfold, float16's fortyfold); the
    loss as asked still passes."""
    assert audit(sapo(tau_neg_factor=1.2), dtype=dtype).row(TEMPERATURE_NEG).verdict == "differs"
    card = audit(sapo(), dtype=dtype)
    assert card.row(TEMPERATURE_NEG).verdict == "pass" and card.row(ON_POLICY).verdict == "pass"
