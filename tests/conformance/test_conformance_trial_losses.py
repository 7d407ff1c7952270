"""A second outside trial of the card: losses that crashed the audit, fooled its state checks, or got a cause the
card does not support. Each loss is written here plainly, the paper's -(4/tau) sigmoid(tau (r - 1)) A with a
per-response mean, changed in one place.

Cost: the tests that need the training precisions (the default audit) take about 4 s each on a busy 2-core CPU;
the others audit in float64 alone.
"""

from __future__ import annotations

import json

import pytest
from _user_module import install_user_module, run_conformance

from sapo_lab.conformance import (
    AGGREGATION,
    EMPTY_RESPONSE,
    EXTREME,
    GATE_SHAPE,
    LEVEL,
    AdapterError,
    audit,
)

LOSSES = '''
import torch


def _tau(A):
    return torch.where(A > 0, torch.full_like(A, 1.0), torch.full_like(A, 1.05))


def _mean(token, mask):
    m = mask.to(token.dtype)
    length = m.sum(1)
    kept = length > 0
    return ((token * m).sum(1) / length.clamp(min=1))[kept].sum() / kept.sum().clamp(min=1)


def paper(logp, old_logp, advantages, mask):
    A = advantages[:, None]
    r = torch.exp(logp - old_logp.detach())
    return _mean(-A * (4 / _tau(A)) * torch.sigmoid(_tau(A) * (r - 1)), mask)


def drops_last_token(logp, old_logp, advantages, mask):
    mask = mask.clone()
    length = mask.sum(-1)
    rows = torch.arange(mask.shape[0])
    mask[rows[length > 0], (length - 1).clamp(min=0)[length > 0]] = False
    return paper(logp, old_logp, advantages, mask)
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    return install_user_module(tmp_path, monkeypatch, "trial_losses", LOSSES)


def _tau(A):
    import torch

    return torch.where(A > 0, torch.full_like(A, 1.0), torch.full_like(A, 1.05))


def _mean(token, mask):
    m = mask.to(token.dtype)
    return ((token * m).sum(1) / m.sum(1).clamp(min=1)).mean()


def _paper(logp, old_logp, advantages, mask, tau=None):
    import torch

    A = advantages[:, None]
    tau = _tau(A) if tau is None else tau
    r = torch.exp(logp - old_logp.detach())
    return _mean(-A * (4 / tau) * torch.sigmoid(tau * (r - 1)), mask)


# ---- 1. a loss that leaves the on-policy probes without tokens ----

def test_a_loss_dropping_each_last_token_gets_a_card_not_a_traceback(user_dir, capsys):
    """Dropping each response's last token empties every one-token probe, so the on-policy factor is 0: catches
    the empty-response row dividing by that zero (a ZeroDivisionError, exit 1 with a traceback, no JSON)."""
    code, out, err = run_conformance(["trial_losses:drops_last_token", "--dtype", "float64", "--json"], capsys)
    card = json.loads(out)  # valid JSON, not a traceback
    assert code == 1 and "Traceback" not in err and card["verdict"].startswith("DIFFERS"), (out, err)
    rows = {r["property"]: r for r in card["rows"]}
    assert rows[AGGREGATION]["verdict"] == "differs"
    assert rows[EMPTY_RESPONSE]["verdict"] == "differs" and "not measurable" in rows[EMPTY_RESPONSE]["measured"]


# ---- 2. state that changes partway through the audit ----

def test_a_loss_changing_after_50_calls_cannot_be_audited():
    """tau grows by half after the 50th call: the two back-to-back calls at the start agree, so the audit went on
    and blamed the change on a token-level pattern and a clamp. Catches the missing repeat at the end."""
    calls = [0]

    def warms_up(logp, old_logp, advantages, mask):
        calls[0] += 1
        return _paper(logp, old_logp, advantages, mask, _tau(advantages[:, None]) * (1.0 if calls[0] <= 50 else 1.5))

    with pytest.raises(AdapterError, match="not deterministic across the audit: the batch it answered first, "
                                           "called again after every check"):
        audit(warms_up, dtype="float64")
    assert calls[0] > 50


# ---- 3. a gradient that is zero (or NaN) is not an exception ----

@pytest.mark.parametrize("epsilon,said", [(1e-8, "zero gradient at every ratio"), (0.0, "non-finite gradient (nan)")])
def test_advantages_renormalised_inside_are_not_said_to_raise(epsilon, said):
    """(A - mean) / (std + eps) inside the loss makes every single-sign probe's advantages 0: a zero gradient, or
    NaN (0 / 0) without the epsilon. Catches the shape row saying "the loss raised" for a loss that returned."""
    def renormalised(logp, old_logp, advantages, mask):
        A = (advantages - advantages.mean()) / (advantages.std() + epsilon)
        return _paper(logp, old_logp, A, mask)

    row = audit(renormalised, dtype="float64").row(GATE_SHAPE)
    assert row.verdict == "differs" and "raise" not in row.summary + row.detail + row.measured, row
    assert said in row.measured and said in row.summary, row


# ---- 4. no cause in the precision lines once a term without A leads ----

def test_after_a_kl_term_the_precision_lines_name_no_cause():
    """k3 KL, 0.04 (e^d - d - 1) with d = old_logp - logp: catches the bfloat16 line's "a clamp that keeps the
    gradient" and the float32 line's "exp(log r) overflows" below log r = -88.72 (that NaN is exp(-log r) of the
    KL term), both causes on a card that promised none."""
    def with_k3_kl(logp, old_logp, advantages, mask):
        d = old_logp.detach() - logp
        return _paper(logp, old_logp, advantages, mask) + 0.04 * _mean(torch.exp(d) - d - 1, mask)

    import torch

    card = audit(with_k3_kl)
    assert card.lead and card.precision_differences(), card.to_text()
    said = " ".join(line for _, _, line in card.precision_differences()) + " ".join(card.precision_lines())
    for cause in ("clamp", "overflows", "exp(log r)", "because", "detach"):
        assert cause not in said, said
    float32 = dict((prop, line) for d, prop, line in card.precision_differences() if d == "float32")
    assert "below log r = -88.72" in float32[EXTREME], float32


# ---- 5. bfloat16 rounding is no importance-sampling level ----

def test_a_flat_gate_in_bfloat16_is_not_given_an_importance_sampling_level():
    """sigmoid(tau log r) has a flat gradient, sech^2(tau log r / 2): in bfloat16 one response's token spread
    (0.048) falls inside the rounding allowance, and the card read "importance-sampling level: mixed" for a
    token-level loss. Catches a cause named from a bfloat16-only row."""
    import torch

    def gate_on_log_ratio(logp, old_logp, advantages, mask):
        A = advantages[:, None]
        tau = _tau(A)
        return _mean(-A * (4 / tau) * torch.sigmoid(tau * (logp - old_logp.detach())), mask)

    card = audit(gate_on_log_ratio)
    assert card.row(LEVEL).verdict == "pass", card.to_text()  # token level in float64
    for dtype, _, line in card.precision_differences():
        if dtype == "bfloat16":
            for reading in ("mixed", "sequence-level", "token-level"):
                assert reading not in line, line


# ---- 6. NaN past the exp range, one rule ----

def test_nan_past_the_exp_range_is_excused_alike_for_a_quotient_of_probabilities():
    """exp(logp) / exp(old_logp) is NaN in bfloat16 above log r = +90.75 (exp(old_logp) underflows there), the
    plain loss from +88.75 (exp(log r) overflows): both past bfloat16's exp range (ln of its largest number,
    88.72). Catches one excused and the other counted as a difference."""
    import torch

    def quotient(logp, old_logp, advantages, mask):
        A = advantages[:, None]
        tau = _tau(A)
        r = torch.exp(logp) / torch.exp(old_logp.detach())
        return _mean(-A * (4 / tau) * torch.sigmoid(tau * (r - 1)), mask)

    limit = 88.72  # ln(3.39e38), bfloat16's largest number, worked out by hand
    for loss in (quotient, _paper):
        card = audit(loss)
        bf16 = card.precisions["bfloat16"]
        assert card.passed and bf16["overflow_above"] >= limit - 0.05, card.to_text()
    assert audit(quotient).precisions["bfloat16"]["overflow_above"] > 90, "the quotient's NaN starts later"


# ---- 7. state keyed by batch shape is not order ----

def test_tau_cached_by_batch_shape_is_said_to_be_state():
    """tau computed on the first batch of each shape and reused: the reversed batch gets the original order's
    temperatures. Catches "the loss depends on the batch's order" for what is state (the reversed batch, first
    at a new padded length, is answered right)."""
    cache = {}

    def tau_by_shape(logp, old_logp, advantages, mask):
        tau = cache.setdefault(tuple(logp.shape), _tau(advantages[:, None]).detach().clone())
        return _paper(logp, old_logp, advantages, mask, tau.to(logp.dtype))

    with pytest.raises(AdapterError, match="keeps state from earlier calls .*not an order dependence"):
        audit(tau_by_shape, dtype="float64")


def test_an_order_dependence_is_still_order():
    """The false alarm of the state reading: responses discounted by position (0.9^i) depend on order however
    often they are called. Catches every order difference being read as state."""
    import torch

    def discounted(logp, old_logp, advantages, mask):
        A = advantages[:, None]
        tau = _tau(A)
        r = torch.exp(logp - old_logp.detach())
        m = mask.to(logp.dtype)
        per = (-A * (4 / tau) * torch.sigmoid(tau * (r - 1)) * m).sum(1) / m.sum(1).clamp(min=1)
        w = 0.9 ** torch.arange(per.shape[0], dtype=per.dtype)
        return (per * w).sum() / w.sum()

    card = audit(discounted, dtype="float64")
    assert card.lead == "batch order and size" and "order" in card.row(card.lead).summary, card.to_text()


# ---- 8. a loosened allowance and a zero gradient without a clamp ----

def test_a_float32_tau_loosens_the_allowance_visibly_and_a_tail_zero_is_no_clamp():
    """tau from torch.where(A > 0, 1.0, 1.05) is float32, so the float64 audit uses float32's allowance (1e-4):
    catches that loosening going unsaid. exp(-softplus(-u)) underflows to 0 below log r = -36.7, where the
    paper's coefficient is e^-36.7 = 1.1e-16: catches "a harmless clamp" for a loss with no clamp."""
    import torch
    import torch.nn.functional as F

    def softplus_form(logp, old_logp, advantages, mask):
        A = advantages[:, None].expand_as(logp)
        tau = torch.where(A > 0, 1.0, 1.05)
        u = tau * torch.expm1(logp - old_logp.detach())
        return _mean(-A * (4.0 / tau) * torch.exp(-F.softplus(-u)), mask)

    card = audit(softplus_form, dtype="float64")
    assert card.passed, card.to_text()
    assert "loosened from float64's 1e-09 to float32's" in card.meta["allowance"], card.meta["allowance"]
    note = card.row(EXTREME).summary
    assert "gradient 0 below log r = -36.7" in note and "harmless: the coefficient is below the allowance" in note
    assert "clamp" not in note, note
