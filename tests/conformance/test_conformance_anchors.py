"""What the audit's verdict rests on, each held to a value stated here and not read from the code under test:
an "error" row is a difference, the temperatures must be > 0, the on-policy note belongs to M = 1 alone, and each
low-precision tolerance sits at an absolute anchor (the per-dtype tests in test_conformance_tolerances.py
bracket the TOLERANCES table with its own entries, so a table loosened everywhere would pass them).

Mistakes each test catches are named in its docstring.
"""

from __future__ import annotations

import pytest
from _user_module import install_user_module
from _user_module import run_conformance as _run

from sapo_lab.conformance import EMPTY_RESPONSE, FINITE_DIFFERENCES, ON_POLICY, TEMPERATURE_NEG, audit

TAU_POS, TAU_NEG = 1.0, 1.05


LOSSES = '''
import torch

TAU_POS, TAU_NEG = 1.0, 1.05


def plain_sapo(scale: float = 1.0, grad_scale: float = 1.0, tau_neg: float = TAU_NEG):
    """-(4/tau) sigmoid(tau (r - 1)) A with a per-response mean; its value times ``scale``, its gradient also
    times ``grad_scale``; ``tau_neg`` the temperature it uses for A <= 0."""

    def loss(logp, old_logp, advantages, mask):
        tau = torch.full_like(advantages, tau_neg).masked_fill(advantages > 0, TAU_POS)[:, None]
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


def raises_on_an_empty_response(logp, old_logp, advantages, mask):
    lengths = mask.sum(-1)
    if bool((lengths == 0).any()) and bool((lengths > 0).any()):
        raise IndexError("response of length 0")
    return plain_sapo()(logp, old_logp, advantages, mask)


paper = plain_sapo()
'''
_NAMES: dict = {}
exec(LOSSES, _NAMES)  # the same source the command line imports from a user's file
plain_sapo, raises_on_an_empty_response = _NAMES["plain_sapo"], _NAMES["raises_on_an_empty_response"]


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    return install_user_module(tmp_path, monkeypatch, "anchor_losses", LOSSES)


# ---- an error row is a difference ----

def test_a_loss_that_raises_on_one_probe_differs(user_dir, capsys):
    """A loss that raises only when a batch holds an empty response: its row is "error", and the card differs
    (exit 1). Catches an "error" row counted as conforming (exit 0, CONFORMS)."""
    card = audit(raises_on_an_empty_response, tau_pos=TAU_POS, tau_neg=TAU_NEG)
    assert card.row(EMPTY_RESPONSE).verdict == "error" and not card.passed
    code, out, _ = _run(["anchor_losses:raises_on_an_empty_response"], capsys)
    lines = out.splitlines()
    assert code == 1 and lines[0] == "DIFFERS in 1 of 15 checks (float64, token level): only where responses are " \
        "empty", out
    assert lines[1].startswith("  - empty response in a batch: the loss raised IndexError: response of length 0"), out


# ---- the temperatures must be > 0 ----

@pytest.mark.parametrize("flag", ["--tau-pos", "--tau-neg"])
def test_a_zero_temperature_is_refused(flag, user_dir, capsys):
    """tau = 0 makes the gate flat (sigmoid(0) everywhere) and 4/tau infinite. Catches `tau >= 0` accepted."""
    code, out, err = _run(["anchor_losses:paper", flag, "0"], capsys)
    assert code == 2 and out == "" and f"{flag} must be a finite number > 0, got 0.0" in err, err
    with pytest.raises(ValueError, match="must be a finite number > 0"):
        audit(plain_sapo(), **{flag[2:].replace("-", "_"): 0.0})


# ---- the on-policy note says M = 1 and nothing else ----

@pytest.mark.parametrize("updates,said", [(1, True), (2, False), (4, False)])
def test_the_on_policy_note_is_for_one_update_per_rollout_only(updates, said, user_dir, capsys):
    """With M = 2 or 4 updates per rollout the ratios leave 1 after the first update and tau matters. Catches the
    note "SAPO's gradient equals GRPO's" printed for any M."""
    code, out, _ = _run(["anchor_losses:paper", "--updates-per-rollout", str(updates)], capsys)
    assert code == 0 and ("SAPO's gradient equals GRPO's" in out.replace("\n    ", " ")) is said, out


# ---- absolute anchors for the low-precision tolerances ----
# Independent of TOLERANCES: float32's epsilon is 1.2e-7 and bfloat16's 7.8e-3, float16's 9.8e-4; a plain
# implementation's rounding is a few epsilons, amplified at most ~1e3 where the gate 1 - sigmoid cancels. A gradient
# off by 0.1 % is then four orders above float32's rounding, and 20 % is 25 bfloat16 epsilons; both are the size of
# real mistakes (tau 1.0 for 1.05 moves the gradient at r = 2 by 2 %). Each must differ.

def test_float32_resolves_a_gradient_off_by_a_thousandth():
    """Catches float32's gradient tolerance loosened a hundredfold (1e-3 would pass) or more."""
    assert audit(plain_sapo(scale=1 + 1e-3), dtype="float32").row(ON_POLICY).verdict == "differs"
    assert audit(plain_sapo(scale=1 + 1e-6), dtype="float32").row(ON_POLICY).verdict == "pass"  # ~10 eps: rounding


def test_float32_resolves_a_value_derivative_off_by_five_percent():
    """The value's finite differences against the applied gradient, off by 5 %: float32 with a step of 2^-7 resolves
    that to ~1e-4. Catches the float32 finite-difference tolerance loosened to >= 5 %."""
    assert audit(plain_sapo(grad_scale=1.05), dtype="float32").row(FINITE_DIFFERENCES).verdict == "differs"


def test_float32_resolves_a_temperature_off_by_half_a_thousandth():
    """tau_neg = 1.05 * 1.0005 for the 1.05 asked: float32 gradients (rounding ~1e-6 where r < 1) pin a gate's
    temperature to ~1e-5 at |r - 1| ~ 1. Catches float32's temperature tolerance loosened a hundredfold."""
    row = audit(plain_sapo(tau_neg=TAU_NEG * 1.0005), dtype="float32").row(TEMPERATURE_NEG)
    assert row.verdict == "differs" and row.values["tau"] == pytest.approx(TAU_NEG * 1.0005, rel=1e-4)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sixteen_bits_resolve_a_gradient_off_by_a_fifth(dtype):
    """Catches a 16-bit gradient tolerance loosened to >= 20 %."""
    assert audit(plain_sapo(scale=1.2), dtype=dtype).row(ON_POLICY).verdict == "differs"
    assert audit(plain_sapo(), dtype=dtype).row(ON_POLICY).verdict == "pass"
