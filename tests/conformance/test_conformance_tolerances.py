"""Which tolerances the conformance audit holds a loss to, observed where they act: the verdict on a loss whose
gradient is off by a known share.

The plain SAPO loss below is scaled by ``1 + delta`` (its gradient moves by exactly that share, its shape and
temperatures do not), or has only its gradient scaled (its value no longer matches the gradient by that share).
Mistakes each test catches: float32's tolerances used for a float64 audit (a 1e-6 gradient error would pass),
one fixed tolerance for every dtype (float32 rounding would be called a difference, or float64 would pass
errors a millionfold above its rounding), a temperature held in float32 not loosening what follows (a correct
float64 loss holding tau = 1.05 as 1.0499999523 would differ), and a held float32 tightening a 16-bit audit.
"""

from __future__ import annotations

import pytest
import torch

from sapo_lab.conformance import DTYPES, FINITE_DIFFERENCES, ON_POLICY, TEMPERATURE_NEG, TOLERANCES, audit
from sapo_lab.conformance.context import Context

# A gradient error this size is a real difference in float64 (rounding there is ~1e-13) and rounding-level
# noise in float32 (eps 1.2e-7, amplified by the gate's cancellation).
BETWEEN_FLOAT64_AND_FLOAT32 = 1e-6


def plain_sapo(scale: float = 1.0, grad_scale: float = 1.0, tau_in_float32: bool = False):
    """The paper's SAPO written plainly (per-response mean), its value times ``scale``, its gradient also
    times ``grad_scale``; ``tau_in_float32`` holds the temperatures as torch.where on Python floats does."""

    def loss(logp, old_logp, advantages, mask):
        if tau_in_float32:
            tau = torch.where(advantages > 0, 1.0, 1.05)[:, None]
        else:
            tau = torch.full_like(advantages, 1.05).masked_fill(advantages > 0, 1.0)[:, None]
        r = torch.exp(logp - old_logp)
        token = -(4 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None]
        m = mask.to(logp.dtype)
        n = m.sum(-1)
        keep = n > 0
        if not bool(keep.any()):
            return (token * m).sum()
        value = ((token * m).sum(-1)[keep] / n[keep]).mean() * scale
        return value + (grad_scale - 1.0) * (value - value.detach())

    return loss


def test_the_unscaled_loss_conforms_in_float64_and_float32():
    """The reference for the tests below: without a planted error the rows they read pass."""
    for dtype in ("float64", "float32"):
        card = audit(plain_sapo(), dtype=dtype)
        assert card.row(ON_POLICY).verdict == "pass" and card.row(FINITE_DIFFERENCES).verdict == "pass", dtype


def test_one_gradient_error_differs_in_float64_and_passes_in_float32():
    loss = plain_sapo(scale=1 + BETWEEN_FLOAT64_AND_FLOAT32)
    assert audit(loss, dtype="float64").row(ON_POLICY).verdict == "differs"
    assert audit(loss, dtype="float32").row(ON_POLICY).verdict == "pass"


def test_tau_held_in_float32_loosens_a_float64_audit_to_float32s_tolerance():
    held = audit(plain_sapo(scale=1 + BETWEEN_FLOAT64_AND_FLOAT32, tau_in_float32=True), dtype="float64")
    assert held.row(TEMPERATURE_NEG).values["tau_held"] != 1.05  # the audit found tau held in float32
    assert held.row(ON_POLICY).verdict == "pass", held.row(ON_POLICY).summary
    # the same loss with tau held in float64 keeps float64's tolerance
    assert audit(plain_sapo(scale=1 + BETWEEN_FLOAT64_AND_FLOAT32), dtype="float64").row(ON_POLICY).verdict == "differs"
    # and the held tau loosens to float32's tolerance, not further
    loose = audit(plain_sapo(scale=1 + 2 * TOLERANCES[torch.float32].grad, tau_in_float32=True), dtype="float64")
    assert loose.row(ON_POLICY).verdict == "differs"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_gradient_tolerance_of_each_dtype_is_the_one_applied(dtype):
    """Half the dtype's tolerance passes, twice it differs: the audit applies that dtype's entry of TOLERANCES."""
    grad_tol = TOLERANCES[DTYPES[dtype]].grad
    assert audit(plain_sapo(scale=1 + grad_tol / 2), dtype=dtype).row(ON_POLICY).verdict == "pass"
    assert audit(plain_sapo(scale=1 + 2 * grad_tol), dtype=dtype).row(ON_POLICY).verdict == "differs"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_finite_difference_tolerance_of_each_dtype_is_the_one_applied(dtype):
    """The value's derivative against the applied gradient: within the dtype's tolerance or not; not measured in
    16 bits, where a central difference is noise."""
    fd_tol = TOLERANCES[DTYPES[dtype]].fd
    if fd_tol is None:
        assert audit(plain_sapo(grad_scale=2.0), dtype=dtype).row(FINITE_DIFFERENCES).verdict == "info"
        return
    inside = audit(plain_sapo(grad_scale=1 + fd_tol / 2), dtype=dtype).row(FINITE_DIFFERENCES)
    outside = audit(plain_sapo(grad_scale=1 + 2 * fd_tol), dtype=dtype).row(FINITE_DIFFERENCES)
    assert inside.verdict == "pass" and outside.verdict == "differs", (inside.measured, outside.measured)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_a_held_float32_only_ever_loosens_the_tolerance(dtype):
    ctx = Context(plain_sapo(), 1.0, 1.05, DTYPES[dtype], None, "token", held_dtype=torch.float32)
    assert ctx.tol.grad == max(TOLERANCES[DTYPES[dtype]].grad, TOLERANCES[torch.float32].grad)
    assert Context(plain_sapo(), 1.0, 1.05, DTYPES[dtype], None, "token").tol == TOLERANCES[DTYPES[dtype]]


def test_float64_holds_gradients_to_far_below_float32s_rounding():
    """An absolute anchor: float64's tolerance sits near its own rounding, not merely below float32's.

    Catches a float64 gradient tolerance loosened anywhere up to float32's (a 1e-8 share would pass)."""
    assert audit(plain_sapo(scale=1 + 1e-8), dtype="float64").row(ON_POLICY).verdict == "differs"
    assert audit(plain_sapo(scale=1 + 1e-12), dtype="float64").row(ON_POLICY).verdict == "pass"
