"""The words an audit chooses, read off small losses written here with one known change each.

Every loss is the paper's -A (4/tau) sigmoid(tau (r - 1)) with a per-response mean, at tau_pos = 1.5 and
tau_neg = 0.5 (distinct, so a sign mixed up shows), audited in float64 alone (each audit takes well under a second).
The expected words follow from the change: by hand, f(1) = 2/tau is 2/1.5 = 1.33333 for A > 0 and 2/0.5 = 4 for
A < 0.
"""

import pytest
import torch

from sapo_lab.conformance import (
    BATCH,
    EMPTY_RESPONSE,
    EXTREME,
    LEVEL,
    ON_POLICY,
    TEMPERATURE_ZERO,
    VALUE_AT_ONE,
    ZERO_ADVANTAGE,
    audit,
)

TAU_POS, TAU_NEG = 1.5, 0.5


def _token_loss(logp, old_logp, advantages, prefactor=4.0, use_abs=False):
    r = torch.exp(logp - old_logp.detach())
    a = advantages[:, None]
    tau = torch.where(a > 0, torch.full_like(a, TAU_POS), torch.full_like(a, TAU_NEG))
    weight = a.abs() if use_abs else a
    return -weight * (prefactor / tau) * torch.sigmoid(tau * (r - 1))


def _mean(token_loss, mask, leave_out_empty=False):
    m = mask.to(token_loss.dtype)
    lengths = m.sum(1)
    per_response = (token_loss * m).sum(1) / lengths.clamp(min=1)
    return per_response[lengths > 0].mean() if leave_out_empty else per_response.mean()


def paper(logp, old_logp, advantages, mask):
    return _mean(_token_loss(logp, old_logp, advantages), mask)


def absolute_advantage(logp, old_logp, advantages, mask):
    return _mean(_token_loss(logp, old_logp, advantages, use_abs=True), mask)


def half_prefactor(logp, old_logp, advantages, mask):
    return _mean(_token_loss(logp, old_logp, advantages, prefactor=2.0), mask)


def empty_left_out(logp, old_logp, advantages, mask):
    return _mean(_token_loss(logp, old_logp, advantages), mask, leave_out_empty=True)


def sequence_level(logp, old_logp, advantages, mask):
    m = mask.to(logp.dtype)
    mean_z = ((logp - old_logp.detach()) * m).sum(1) / m.sum(1).clamp(min=1)
    r = torch.exp(mean_z)[:, None].expand_as(logp)
    a = advantages[:, None]
    tau = torch.where(a > 0, torch.full_like(a, TAU_POS), torch.full_like(a, TAU_NEG))
    return _mean(-a * (4.0 / tau) * torch.sigmoid(tau * (r - 1)), mask)


def first_row_pushed(logp, old_logp, advantages, mask):
    # adds 0 to the value but a gradient on whichever response comes first: order, not size
    return paper(logp, old_logp, advantages, mask) + 0.3 * ((logp[0] - logp[0].detach()) * mask[0]).sum()


def detached_weight_clamped(logp, old_logp, advantages, mask):
    # the paper's coefficient r w(r), detached, at log r clamped to [-20, 20]: frozen past the clamp
    r = torch.exp((logp - old_logp.detach()).clamp(-20, 20))
    a = advantages[:, None]
    tau = torch.where(a > 0, torch.full_like(a, TAU_POS), torch.full_like(a, TAU_NEG))
    s = torch.sigmoid(tau * (r - 1))
    return _mean(-a * (r * 4 * s * (1 - s)).detach() * logp, mask)


def _audit(loss, level="token"):
    return audit(loss, tau_pos=TAU_POS, tau_neg=TAU_NEG, dtype="float64", level=level)


def test_the_paper_value_reads_f1_per_sign():
    """Catches f(1) for A < 0 divided by tau_pos (2/1.5 both times) and 'the paper's 2/tau' read on one side only."""
    card = _audit(paper)
    assert card.passed
    assert card.row(VALUE_AT_ONE).measured.endswith("with f(1) = 1.33333 (A > 0), 4 (A < 0), the paper's 2/tau")
    # |A|: the A < 0 factor is -1, so f(1) = 2 * (-1) / 0.5 = -4 there, not the paper's
    wrong = _audit(absolute_advantage).row(VALUE_AT_ONE).measured
    assert wrong.endswith("with f(1) = 1.33333 (A > 0), -4 (A < 0), not the paper's 2/tau")


def test_absolute_advantage_is_named_by_its_signs():
    """Catches the |A| cause read with the signs' factors exchanged: |A| keeps factor 1 for A > 0, -1 for A < 0."""
    row = _audit(absolute_advantage).row(ON_POLICY)
    assert row.summary == "on-policy gradient factor 1 / -1 instead of 1: A < 0 gives -1: the loss uses |A|"


def test_a_half_prefactor_is_named_at_factor_one_half():
    """Catches the 2/tau-prefactor cause read at another factor: 2/tau in place of 4/tau halves both factors."""
    row = _audit(half_prefactor).row(ON_POLICY)
    assert row.summary == ("on-policy gradient factor 0.5 / 0.5 instead of 1: a 2/tau prefactor where the paper has "
                           "4/tau (or the loss halved)")


def test_an_empty_response_counted_and_left_out_are_told_apart():
    """Catches the two words exchanged: .mean() over every response counts the empty one (lengths 2, 0, 3: the
    others' weights become 2/3 of the paper's); filtering empty responses leaves it out."""
    assert _audit(paper).row(EMPTY_RESPONSE).measured == (
        "finite; the empty response is counted in the mean (the others' weights shrink by 2/3)")
    assert _audit(empty_left_out).row(EMPTY_RESPONSE).measured == "finite; the empty response is left out of the mean"


def test_a_sequence_level_loss_conforms_at_sequence_level():
    """Catches the predicted sequence ratio averaged over the padded length (the level probe pads a 2-token
    response to 3): a geometric-mean-ratio loss must read as sequence level and pass."""
    row = _audit(sequence_level, level="sequence").row(LEVEL)
    assert (row.verdict, row.measured) == ("pass", "sequence-level: one gradient per response, from its "
                                                   "geometric-mean ratio")


def test_an_order_dependence_with_an_unchanged_value_says_order():
    """Catches the batch summary requiring both the value and the gradient to move before saying 'order': this
    loss's value is the paper's in any order, only the first response's gradient moves."""
    row = _audit(first_row_pushed).row(BATCH)
    assert row.verdict == "differs"
    assert row.summary.startswith("the loss depends on the batch's order: the responses reversed change the value "
                                  "by 0")


def test_a_gradient_frozen_below_the_allowance_is_credited():
    """Catches frozen gradients never credited: past log r = -20 the clamped coefficient r w(r) is below
    e^-20 (about 2e-9) of the on-policy one, far under the 1e-6 credit, so the row passes with a harmless note."""
    row = _audit(detached_weight_clamped).row(EXTREME)
    assert row.verdict == "pass"
    assert "gradient frozen below log r = -2" in row.summary
    assert "(A > 0) (harmless:" in row.summary and "(A < 0) (harmless:" in row.summary


@pytest.mark.parametrize("loss", [paper, empty_left_out])
def test_both_weightings_of_an_empty_response_pass(loss):
    """Catches counting the empty response made a failure: it is a scale change (review §3), so the row passes."""
    assert _audit(loss).row(EMPTY_RESPONSE).verdict == "pass"


def shifted_advantage(logp, old_logp, advantages, mask):
    # A + 0.1 inside the loss: an equal-reward group (every A = 0) still gets a gradient
    return paper(logp, old_logp, advantages + 0.1, mask)


def test_a_confirmed_shift_keeps_its_cause_on_the_zero_temperature_row():
    """Catches the A = 0 temperature row's cause dropped when the equal-reward group confirms the shift (the
    condition read the wrong way round): with A + 0.1 both rows say the advantage is shifted."""
    card = _audit(shifted_advantage)
    assert "advantage_shift" in card.row(ZERO_ADVANTAGE).values
    assert card.row(TEMPERATURE_ZERO).summary.endswith(": the advantage is shifted")
