"""The conformance audit (sapo_lab.conformance) must tell every plausible wrong SAPO apart from the paper's.

Each wrong implementation below changes one thing in a plain SAPO loss (``plain_sapo``: the
sigmoid gate through autograd, per-response mean, as a framework would write it) or comes from
``sapo_lab.objective.planted_mistakes``; the test asserts WHICH row flags it (the mistake each one plants is
its docstring). Gradient through old_logp is a caller contract, noted, not a difference
(test_conformance_cli.py holds the command line to the paper's objective and to each planted mistake).

* scale: 4/tau missing; sigmoid without the factor 4; advantage sign flipped; |A| used; loss
  divided by a constant (a max completion length);
* temperature: tau_pos and tau_neg swapped; one tau for both signs; tau chosen by the sign of
  the ratio instead of the advantage; tau dividing (r - 1) instead of multiplying it;
* gate shape: gate on r instead of r - 1; exp(logp) used as the ratio; w(r) r without
  stop-gradient (mistakes.product_without_stop_gradient); behaviour log-probs recomputed from
  the current policy (mistakes.behavior_recomputed_from_current);
* value vs gradient: a detached weight whose gradient is not the paper's; a detached weight with
  the wrong value (-sg(A w) r) and the fully detached weight (mistakes.fully_detached_weight)
  apply the paper's gradient, so they conform as gradient-equivalent surrogates, said in a note;
* aggregation: token pool; divide by the longest response; sum; per-response sum; divide by
  the padded length (mistakes.average_over_padding);
* level: sequence-level ratio where token level was asked; at sequence level, the arithmetic
  mean of the ratios, or the product without length normalisation;
* extremes: ratio clamped at 10; a straight-through clamp at log r = -5 that freezes the
  gradient; a gate weight e^u/(1+e^u)^2 that overflows to NaN (a clamp of log r at +-20 changes
  no gradient by more than 2e-9 of the on-policy one and is credited, not flagged);
* inputs: the mask ignored; advantages whitened inside the loss or
  shifted by an epsilon (A = 0 tokens get a gradient); NaN for a response with no tokens;
  NaN for a batch with no tokens.
"""

from __future__ import annotations

import functools
import json
import math

import pytest
import torch

from sapo_lab import policy_loss
from sapo_lab.cli import main as cli_main
from sapo_lab.conformance import (
    AGGREGATION,
    EMPTY_BATCH,
    EMPTY_RESPONSE,
    EXTREME,
    FINITE_DIFFERENCES,
    GATE_SHAPE,
    LEVEL,
    OLD_LOGP,
    ON_POLICY,
    PADDING,
    ROW_ORDER,
    TEMPERATURE_NEG,
    TEMPERATURE_POS,
    VALUE_AT_ONE,
    ZERO_ADVANTAGE,
    AdapterError,
    ReportCard,
    audit,
)
from sapo_lab.objective import planted_mistakes as mistakes

TAU_POS, TAU_NEG = 1.0, 1.05


# ---- a plain SAPO, written as a framework would, and its building blocks ----

def choose(condition, a, b, like):
    """a where condition else b, in like's dtype (python floats in torch.where would round 1.05 to float32)."""
    return torch.where(condition, torch.tensor(a, dtype=like.dtype), torch.tensor(b, dtype=like.dtype)).expand_as(like)


def tau_by_advantage(adv, like):
    return choose(adv[:, None] > 0, TAU_POS, TAU_NEG, like)


def gate(r, tau):
    return 4.0 / tau * torch.sigmoid(tau * (r - 1.0))


def ratio(logp, old):
    return torch.exp(logp - old.detach())


def per_response_mean(tok, mask):
    m = mask.to(tok.dtype)
    lengths = m.sum(-1)
    keep = lengths > 0
    if not bool(keep.any()):
        return (tok * m).sum()  # no token: 0 with zero gradient
    return ((tok * m).sum(-1)[keep] / lengths[keep]).mean()


def plain_sapo(logp, old, adv, mask):
    r = ratio(logp, old)
    return per_response_mean(-adv[:, None] * gate(r, tau_by_advantage(adv, r)), mask)


def sapo_lab_loss(logp, old, adv, mask, **kw):
    return policy_loss(logp, old, adv, mask, loss_type="sapo", tau_pos=TAU_POS, tau_neg=TAU_NEG,
                       compute_stats=False, **kw).loss


def _token_loss(logp, old, adv, surrogate=gate, r=None):
    r = ratio(logp, old) if r is None else r
    return -adv[:, None] * surrogate(r, tau_by_advantage(adv, r))


# ---- wrong implementations ----

def missing_4_over_tau(logp, old, adv, mask):
    """sigmoid(tau (r-1)) without 4/tau: at r = 1 the gradient is tau/4 of -A."""
    return per_response_mean(_token_loss(logp, old, adv, lambda r, t: torch.sigmoid(t * (r - 1))), mask)


def sigmoid_without_4(logp, old, adv, mask):
    """(1/tau) sigmoid: the factor 4 forgotten, gradient 1/4 of -A at r = 1."""
    return per_response_mean(_token_loss(logp, old, adv, lambda r, t: torch.sigmoid(t * (r - 1)) / t), mask)


def sign_flipped(logp, old, adv, mask):
    """Returns the objective where a loss is expected (+A f)."""
    return -plain_sapo(logp, old, adv, mask)


def absolute_advantage(logp, old, adv, mask):
    """|A| in the loss (temperatures still from the sign)."""
    r = ratio(logp, old)
    return per_response_mean(-adv.abs()[:, None] * gate(r, tau_by_advantage(adv, r)), mask)


def divided_by_constant_length(logp, old, adv, mask):
    """Each response's sum / a constant max completion length (1024), then the mean over responses."""
    tok = _token_loss(logp, old, adv) * mask
    return (tok.sum(-1) / 1024.0).mean()


def swapped_temperatures(logp, old, adv, mask):
    """tau_neg used for A > 0 and tau_pos for A < 0."""
    r = ratio(logp, old)
    tau = choose(adv[:, None] > 0, TAU_NEG, TAU_POS, r)
    return per_response_mean(-adv[:, None] * gate(r, tau), mask)


def single_temperature(logp, old, adv, mask):
    """tau_pos for both signs."""
    r = ratio(logp, old)
    return per_response_mean(-adv[:, None] * gate(r, TAU_POS), mask)


def temperature_by_ratio_sign(logp, old, adv, mask):
    """tau_pos where r > 1, tau_neg elsewhere: the ratio's side instead of the advantage's sign."""
    r = ratio(logp, old)
    tau = choose(r.detach() > 1, TAU_POS, TAU_NEG, r)
    return per_response_mean(-adv[:, None] * gate(r, tau), mask)


def temperature_inverted(logp, old, adv, mask):
    """4 tau sigmoid((r-1)/tau): tau read as a width, so the gate of A < 0 is 1/tau_neg wide."""
    return per_response_mean(_token_loss(logp, old, adv, lambda r, t: 4 * t * torch.sigmoid((r - 1) / t)), mask)


def gate_on_ratio(logp, old, adv, mask):
    """sigmoid(tau r) instead of sigmoid(tau (r - 1))."""
    return per_response_mean(_token_loss(logp, old, adv, lambda r, t: 4 / t * torch.sigmoid(t * r)), mask)


def probability_as_ratio(logp, old, adv, mask):
    """exp(logp) used where the ratio exp(logp - old) belongs."""
    return per_response_mean(_token_loss(logp, old, adv, r=torch.exp(logp)), mask)


def detached_weight_wrong_value(logp, old, adv, mask):
    """-sg(A w(r)) r: the right gradient, but the value is not the surrogate whose derivative it is."""
    r = ratio(logp, old)
    tau = tau_by_advantage(adv, r)
    w = 4 * torch.sigmoid(tau * (r - 1)) * torch.sigmoid(-tau * (r - 1))
    return per_response_mean(-(adv[:, None] * w).detach() * r, mask)


def detached_weight_wrong_gradient(logp, old, adv, mask):
    """-sg(A w_2tau(r)) r: a detached weight whose gradient is not the paper's either (twice each tau)."""
    r = ratio(logp, old)
    tau = 2 * tau_by_advantage(adv, r)
    w = 4 * torch.sigmoid(tau * (r - 1)) * torch.sigmoid(-tau * (r - 1))
    return per_response_mean(-(adv[:, None] * w).detach() * r, mask)


def token_pool(logp, old, adv, mask):
    """One mean over every token in the batch."""
    m = mask.to(logp.dtype)
    return (_token_loss(logp, old, adv) * m).sum() / m.sum()


def divided_by_longest(logp, old, adv, mask):
    """Each response's sum / the longest response's length, then the mean."""
    m = mask.to(logp.dtype)
    return ((_token_loss(logp, old, adv) * m).sum(-1) / m.sum(-1).max()).mean()


def summed(logp, old, adv, mask):
    """Sum over all tokens instead of a mean."""
    return (_token_loss(logp, old, adv) * mask).sum()


def response_sums(logp, old, adv, mask):
    """Sum over each response's tokens, mean over responses."""
    return (_token_loss(logp, old, adv) * mask).sum(-1).mean()


def _sequence_sapo(logp, old, adv, mask, statistic):
    m = mask.to(logp.dtype)
    s = statistic(logp - old.detach(), m)
    return per_response_mean(_token_loss(logp, old, adv, r=s[:, None].expand_as(logp)), mask)


def geometric_mean(z, m):
    return torch.exp((z * m).sum(-1) / m.sum(-1).clamp(min=1))


def sequence_ratio(logp, old, adv, mask):
    """The response's geometric-mean ratio for every token (GSPO-style) where token level was asked."""
    return _sequence_sapo(logp, old, adv, mask, geometric_mean)


def sequence_arithmetic_mean(logp, old, adv, mask):
    """At sequence level, the arithmetic mean of the token ratios instead of their geometric mean."""
    return _sequence_sapo(logp, old, adv, mask, lambda z, m: (torch.exp(z) * m).sum(-1) / m.sum(-1).clamp(min=1))


def sequence_product(logp, old, adv, mask):
    """At sequence level, the product of the token ratios (no length normalisation)."""
    return _sequence_sapo(logp, old, adv, mask, lambda z, m: torch.exp((z * m).sum(-1)))


def log_ratio_clamped_20(logp, old, adv, mask):
    """log r clamped to [-20, 20] before exp."""
    r = torch.exp(torch.clamp(logp - old.detach(), -20.0, 20.0))
    return per_response_mean(_token_loss(logp, old, adv, r=r), mask)


def ratio_clamped_10(logp, old, adv, mask):
    """r clamped to at most 10."""
    return per_response_mean(_token_loss(logp, old, adv, r=torch.clamp(ratio(logp, old), max=10.0)), mask)


def straight_through_clamp(logp, old, adv, mask):
    """log r clamped at -5 in value, with the gradient passed straight through (frozen below -5)."""
    z = logp - old.detach()
    z = z + (z.clamp(min=-5.0) - z).detach()
    return per_response_mean(_token_loss(logp, old, adv, r=torch.exp(z)), mask)


class _OverflowingGate(torch.autograd.Function):
    """f(r) with a backward w = 4 e^u / (1 + e^u)^2, which is inf/inf = NaN once e^u overflows."""

    @staticmethod
    def forward(ctx, r, tau):
        ctx.save_for_backward(r, tau)
        return 4 / tau * torch.sigmoid(tau * (r - 1))

    @staticmethod
    def backward(ctx, grad):
        r, tau = ctx.saved_tensors
        e = torch.exp(tau * (r - 1))
        return grad * 4 * e / (1 + e) ** 2, None


def overflowing_gate_weight(logp, old, adv, mask):
    """The gate weight written as e^u / (1 + e^u)^2: NaN for large ratios."""
    return per_response_mean(_token_loss(logp, old, adv, lambda r, t: _OverflowingGate.apply(r, t)), mask)


def old_logp_not_detached(logp, old, adv, mask):
    """exp(logp - old) without detaching old: the gradient also flows into the behaviour log-probs."""
    return per_response_mean(_token_loss(logp, old, adv, r=torch.exp(logp - old)), mask)


def mask_ignored(logp, old, adv, mask):
    """Mean over every position, padding included."""
    return _token_loss(logp, old, adv).mean(-1).mean()


def whitened_advantages(logp, old, adv, mask):
    """Advantages re-normalised inside the loss: an A = 0 response among others gets a gradient."""
    a = (adv - adv.mean()) / (adv.std() + 1e-4) if adv.numel() > 1 else adv
    r = ratio(logp, old)
    return per_response_mean(-a[:, None] * gate(r, tau_by_advantage(adv, r)), mask)


def epsilon_advantages(logp, old, adv, mask):
    """A + 1e-6, 'to avoid a zero advantage'."""
    r = ratio(logp, old)
    return per_response_mean(-(adv + 1e-6)[:, None] * gate(r, tau_by_advantage(adv, r)), mask)


def nan_on_empty_response(logp, old, adv, mask):
    """Per-response mean dividing by the length without a guard: 0/0 for an empty response."""
    m = mask.to(logp.dtype)
    return ((_token_loss(logp, old, adv) * m).sum(-1) / m.sum(-1)).mean()


def nan_on_empty_batch(logp, old, adv, mask):
    """Mean over the non-empty responses, with no guard for a batch that has none (mean of nothing)."""
    m = mask.to(logp.dtype)
    keep = m.sum(-1) > 0
    return ((_token_loss(logp, old, adv) * m).sum(-1)[keep] / m.sum(-1)[keep]).mean()


def _from_mistakes(fn):
    return functools.partial(fn, tau_pos=TAU_POS, tau_neg=TAU_NEG)


# (implementation, level the audit expects, rows that must flag it, extra check on the card)
WRONG = {
    "missing 4/tau": (missing_4_over_tau, "token", [ON_POLICY],
                      lambda c: c.row(ON_POLICY).values["factor_neg"] == pytest.approx(TAU_NEG / 4)),
    "sigmoid without 4": (sigmoid_without_4, "token", [ON_POLICY],
                          lambda c: c.row(ON_POLICY).values["factor_pos"] == pytest.approx(0.25)),
    "advantage sign flipped": (sign_flipped, "token", [ON_POLICY],
                               lambda c: c.row(ON_POLICY).values["factor_pos"] == pytest.approx(-1)),
    "|A|": (absolute_advantage, "token", [ON_POLICY],
            lambda c: c.row(ON_POLICY).values["factor_neg"] == pytest.approx(-1)),
    "constant length normaliser": (divided_by_constant_length, "token", [ON_POLICY, AGGREGATION],
                                   lambda c: c.row(AGGREGATION).values["aggregation"] == "response_sum_mean"),
    "temperatures swapped": (swapped_temperatures, "token", [TEMPERATURE_POS, TEMPERATURE_NEG],
                             lambda c: c.row(TEMPERATURE_POS).values["tau"] == pytest.approx(TAU_NEG)),
    "one temperature": (single_temperature, "token", [TEMPERATURE_NEG],
                        lambda c: c.row(TEMPERATURE_NEG).values["tau"] == pytest.approx(TAU_POS)),
    "temperature by ratio sign": (temperature_by_ratio_sign, "token", [TEMPERATURE_POS, TEMPERATURE_NEG, GATE_SHAPE],
                                  lambda c: math.isnan(c.row(TEMPERATURE_POS).values["tau"])),
    "temperature inverted": (temperature_inverted, "token", [TEMPERATURE_NEG],
                             lambda c: c.row(TEMPERATURE_NEG).values["tau"] == pytest.approx(1 / TAU_NEG)),
    "gate on r": (gate_on_ratio, "token", [ON_POLICY, GATE_SHAPE], None),
    "exp(logp) as ratio": (probability_as_ratio, "token", [ON_POLICY, GATE_SHAPE], None),
    "product without stop-gradient": (_from_mistakes(mistakes.product_without_stop_gradient), "token",
                                      [GATE_SHAPE], None),
    "behaviour from current policy": (_from_mistakes(mistakes.behavior_recomputed_from_current), "token",
                                      [GATE_SHAPE], None),
    "detached weight, wrong gradient": (detached_weight_wrong_gradient, "token", [FINITE_DIFFERENCES, GATE_SHAPE],
                                        lambda c: "a detached weight" in c.row(FINITE_DIFFERENCES).summary),
    "token pool": (token_pool, "token", [AGGREGATION],
                   lambda c: c.row(AGGREGATION).values["aggregation"] == "token_pool"),
    "divide by longest": (divided_by_longest, "token", [AGGREGATION],
                          lambda c: c.row(AGGREGATION).values["aggregation"] == "longest_response_mean"),
    "sum": (summed, "token", [AGGREGATION], lambda c: c.row(AGGREGATION).values["aggregation"] == "sum"),
    "per-response sum": (response_sums, "token", [AGGREGATION],
                         lambda c: c.row(AGGREGATION).values["aggregation"] == "response_sum_mean"),
    "average over padding": (_from_mistakes(mistakes.average_over_padding), "token", [AGGREGATION],
                             lambda c: c.row(AGGREGATION).values["aggregation"] == "padded_length_mean"),
    "sequence ratio at token level": (sequence_ratio, "token", [LEVEL],
                                      lambda c: c.row(LEVEL).values["level"] == "sequence"),
    "sequence arithmetic mean": (sequence_arithmetic_mean, "sequence", [LEVEL],
                                 lambda c: c.row(LEVEL).values["level"] == "other"),
    "sequence product": (sequence_product, "sequence", [LEVEL],
                         lambda c: c.row(LEVEL).values["level"] == "sequence_other"),
    "ratio clamped at 10": (ratio_clamped_10, "token", [EXTREME],
                            lambda c: c.row(EXTREME).values["A < 0"]["upper"]["threshold"]
                            == pytest.approx(math.log(10), abs=1e-4)),
    "straight-through clamp": (straight_through_clamp, "token", [EXTREME],
                               lambda c: c.row(EXTREME).values["A > 0"]["lower"]["kind"] == "frozen"
                               and c.row(EXTREME).values["A > 0"]["lower"]["threshold"] == pytest.approx(-5, abs=1e-4)),
    "overflowing gate weight": (overflowing_gate_weight, "token", [EXTREME],
                                lambda c: c.row(EXTREME).values["A > 0"]["upper"]["kind"] == "nonfinite"),
    "mask ignored": (mask_ignored, "token", [PADDING], None),
    "whitened advantages": (whitened_advantages, "token", [ZERO_ADVANTAGE], None),
    "epsilon advantages": (epsilon_advantages, "token", [ZERO_ADVANTAGE], None),
    "NaN on empty response": (nan_on_empty_response, "token", [EMPTY_RESPONSE], None),
    "NaN on empty batch": (nan_on_empty_batch, "token", [EMPTY_BATCH], None),
}


# Surrogates that apply the paper's gradient though their value is not its objective: training follows the
# paper, so the card conforms and says so in a note.
GRADIENT_EQUIVALENT = {
    "detached weight, wrong value": detached_weight_wrong_value,
    "fully detached weight": _from_mistakes(mistakes.fully_detached_weight),
}


def test_every_mistake_in_sapo_lab_mistakes_is_audited():
    """A mistake added to sapo_lab.objective.planted_mistakes without a case here would go unchecked."""
    audited = {getattr(impl, "func", impl) for impl, *_ in WRONG.values()}
    audited |= {getattr(impl, "func", impl) for impl in GRADIENT_EQUIVALENT.values()}
    assert set(mistakes.WRONG_IMPLEMENTATIONS.values()) <= audited


@pytest.mark.parametrize("name", list(GRADIENT_EQUIVALENT))
def test_a_gradient_equivalent_surrogate_conforms_with_a_note(name):
    """Catches DIFFERS for a loss that trains exactly as the paper's (the value's derivative is not the applied
    gradient, but the applied gradient is right), and a silent CONFORMS that hides that its value is not SAPO's."""
    card = audit(GRADIENT_EQUIVALENT[name], name=name, tau_pos=TAU_POS, tau_neg=TAU_NEG)
    fd = card.row(FINITE_DIFFERENCES)
    assert card.passed and fd.verdict == "info", card.to_text()
    assert fd.values["vs_autograd"] > 1e-3  # the value really is not the objective: the note is not decoration
    assert fd.summary.startswith("gradient-equivalent: the applied gradient is the paper's") and fd in card.notes()


@pytest.mark.parametrize("name", list(WRONG))
def test_audit_flags_each_wrong_implementation(name):
    """Each planted mistake must fail the card and be flagged by the row(s) that isolate it."""
    impl, level, rows, check = WRONG[name]
    card = audit(impl, name=name, tau_pos=TAU_POS, tau_neg=TAU_NEG, level=level, dtype="float64")  # float64 alone
    assert not card.passed
    for prop in rows:
        assert card.row(prop).verdict == "differs", (prop, card.row(prop))
    if check is not None:
        assert check(card), card.to_markdown()


@pytest.mark.parametrize("loss", [plain_sapo, sapo_lab_loss], ids=["plain", "sapo_lab"])
def test_correct_implementations_pass(loss):
    """False alarms: a plain sigmoid implementation (saturating at large r) and sapo_lab's own must pass every row."""
    card = audit(loss, name="ok")
    assert card.passed, card.to_markdown()
    assert card.notes() == []  # both detach old_logp themselves: no note, and no stray one
    assert [r.property for r in card.rows] == list(ROW_ORDER)
    assert card.row(VALUE_AT_ONE).verdict == "info"


def test_value_at_one_says_centred_or_not():
    """sapo_lab's loss is centred, the plain one is not; neither is a failure."""
    assert audit(sapo_lab_loss).row(VALUE_AT_ONE).values["kind"] == "centred"
    assert audit(plain_sapo).row(VALUE_AT_ONE).values["kind"] == "uncentred"


def test_sapo_lab_settings_are_identified():
    """policy_loss's own switches must read as what they are: token pool, sequence level, a skip at |log r| = 20."""
    pool = audit(functools.partial(sapo_lab_loss, aggregation="token_pool"), dtype="float64")
    assert pool.row(AGGREGATION).values["aggregation"] == "token_pool"
    assert [r.property for r in pool.rows if r.verdict == "differs"] == [AGGREGATION]

    seq = functools.partial(sapo_lab_loss, importance_sampling_level="sequence")
    assert audit(seq, level="sequence", dtype="float64").passed
    assert audit(seq, dtype="float64").row(LEVEL).values["level"] == "sequence"

    skip = audit(functools.partial(sapo_lab_loss, max_log_ratio_policy="skip"), dtype="float64").row(EXTREME)
    assert skip.verdict == "pass" and "harmless" in skip.measured  # a 2e-9 change, credited
    lower = skip.values["A < 0"]["lower"]
    assert (lower["threshold"], lower["kind"], lower["harmless"]) == (pytest.approx(-20, abs=1e-4), "zero", True)
    raises = audit(functools.partial(sapo_lab_loss, max_log_ratio_policy="error"), dtype="float64").row(EXTREME)
    assert raises.verdict == "differs" and "raises" in raises.measured


@pytest.mark.parametrize("loss_type", ["grpo", "sapo_directional", "gauss"])
def test_other_sapo_lab_kernels_are_not_sapo(loss_type):
    """The clip and the other smooth kernels share SAPO's r = 1 behaviour but not its gate."""
    card = audit(lambda lp, old, a, m: policy_loss(lp, old, a, m, loss_type=loss_type, compute_stats=False).loss)
    assert card.row(GATE_SHAPE).verdict == "differs"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_low_precision_does_not_false_alarm(dtype):
    """Tolerances follow the dtype: sapo_lab's loss passes in float32 and bfloat16 (FD is not measured in 16 bits)."""
    card = audit(sapo_lab_loss, dtype=dtype)
    assert card.passed, card.to_markdown()
    assert card.dtype == dtype


def test_plain_float32_overflows_where_exp_does():
    """exp(log r) overflows float32 above 88.72: a plain implementation's gradient becomes NaN there, and the audit says
    so and names the fix; a clamp of log r at +-20 keeps float32 finite and is credited."""
    row = audit(plain_sapo, dtype=torch.float32).row(EXTREME)
    upper = row.values["A > 0"]["upper"]
    assert upper["kind"] == "nonfinite" and upper["threshold"] == pytest.approx(math.log(torch.finfo(torch.float32).max),
                                                                                 abs=1e-3)
    assert row.verdict == "differs" and "overflows float32" in row.summary and "a clamp of log r" in row.summary
    clamped = audit(log_ratio_clamped_20, dtype=torch.float32)
    assert clamped.passed, clamped.to_text(details=True)
    assert clamped.row(EXTREME).values["A > 0"]["lower"]["harmless"] is True
    assert "(harmless: " in clamped.row(EXTREME).summary and clamped.row(EXTREME) in clamped.notes()


def test_harmless_clamp_is_credited_in_float64():
    """A clamp of log r at +-20 (verl's, SkyRL's) changes a gradient by at most c(e^-20) = 2e-9 of the on-policy one:
    it passes, with the threshold and the size of the change; a clamp of r at 10 (a 3e-3 change) does not."""
    card = audit(log_ratio_clamped_20)
    assert card.passed, card.to_text(details=True)
    lower = card.row(EXTREME).values["A > 0"]["lower"]
    assert lower["threshold"] == pytest.approx(-20, abs=1e-4) and lower["impact"] < 1e-8
    ten = audit(ratio_clamped_10).row(EXTREME).values["A < 0"]["upper"]
    assert ten["harmless"] is False and ten["impact"] > 1e-3


def test_gradient_into_old_logp_is_a_caller_contract():
    """The paper's objective computes logp - old_logp; whether old_logp carries a gradient is the caller's doing. A loss
    that lets it through conforms, with a note that names the contract; the number of checks does not change."""
    card = audit(old_logp_not_detached)
    assert card.passed and len(card.checks) == len(audit(plain_sapo).checks)
    row = card.row(OLD_LOGP)
    assert row.verdict == "info" and row.values["max_abs_old_gradient"] > 0.1
    assert "caller contract" in row.summary and row in card.notes()
    assert audit(sapo_lab_loss).row(OLD_LOGP).summary == ""  # a loss that detaches old_logp itself: no note


def test_card_round_trips_through_json():
    card = audit(missing_4_over_tau, name="x", meta={"framework": "test"})
    back = ReportCard.from_dict(json.loads(card.to_json()))
    assert back.to_dict() == card.to_dict() and back.passed is False and back.meta["framework"] == "test"
    md = card.to_markdown()
    assert "| on-policy gradient (r = 1) |" in md and "differs" in md


def test_adapter_errors_and_raising_rows():
    """A wrong signature or a non-scalar is refused before auditing; an exception inside a probe is an 'error' row."""
    with pytest.raises(AdapterError, match="must accept"):
        audit(lambda logp, old: logp.sum())
    with pytest.raises(AdapterError, match="not a scalar"):
        audit(lambda logp, old, adv, mask: logp * 2)
    with pytest.raises(ValueError, match="dtype must be one of"):
        audit(plain_sapo, dtype="float8")
    with pytest.raises(ValueError, match="tau_neg must be a finite number > 0"):
        audit(plain_sapo, tau_neg=float("nan"))

    def raises(logp, old, adv, mask):
        raise RuntimeError("framework not installed\nsecond line")

    with pytest.raises(AdapterError, match="raised RuntimeError: framework not installed$"):
        audit(raises)

    def raises_on_empty_batch(logp, old, adv, mask):
        if not bool(mask.any()):
            raise RuntimeError("no tokens")
        return plain_sapo(logp, old, adv, mask)

    card = audit(raises_on_empty_batch)  # raising on an empty batch is a clear error: it passes
    assert card.passed and card.row(EMPTY_BATCH).values == {"raises": "RuntimeError: no tokens"}

    def raises_far_off_policy(logp, old, adv, mask):
        if bool(((logp - old).abs() > 10).any()):
            raise ValueError("ratio out of range")
        return plain_sapo(logp, old, adv, mask)

    card = audit(raises_far_off_policy)  # raising is one difference, out of the same number of checks
    assert card.row(EXTREME).verdict == "differs" and "raises (ValueError: ratio out of range)" in \
        card.row(EXTREME).measured
    assert len(card.checks) == len(audit(plain_sapo).checks)
    assert card.verdict_line().startswith(f"DIFFERS in 1 of {len(card.checks)} checks")


USER_MODULE = '''
import torch

def good(logp, old, adv, mask):
    tau = torch.where(adv[:, None] > 0, torch.tensor(1.0, dtype=logp.dtype), torch.tensor(1.05, dtype=logp.dtype))
    r = torch.exp(logp - old.detach())
    tok = -adv[:, None] * 4 / tau * torch.sigmoid(tau * (r - 1)) * mask
    n = mask.sum(-1)
    keep = n > 0
    return (tok.sum(-1)[keep] / n[keep]).mean() if bool(keep.any()) else tok.sum()

def no_four(logp, old, adv, mask):
    return good(logp, old, adv, mask) / 4

def two_args(logp, old):
    return logp.sum()

def type_error_inside(logp, old, adv, mask):
    return torch.sigmoid(logp, old, adv)

def vector(logp, old, adv, mask):
    return logp.sum(-1)

NOT_CALLABLE = 3
'''


@pytest.mark.parametrize(
    "args,match",
    [
        (["nocolon"], "MODULE:FUNCTION"),
        (["no_such_module_xyz:f"], "cannot import 'no_such_module_xyz': ModuleNotFoundError"),
        (["{dir}/missing.py:f"], "no such file"),
        (["{file}:missing"], "has no attribute 'missing'"),
        (["{file}:NOT_CALLABLE"], "is not callable"),
        (["{file}:two_args"], "must accept (logp, old_logp, advantages, mask)"),
        (["{file}:type_error_inside"], "raised TypeError"),
        (["{file}:vector"], "not a scalar"),
        (["{file}:good", "--tau-pos", "-1"], "--tau-pos must be a finite number > 0"),
        (["{file}:good", "--dtype", "float8"], "invalid choice"),
    ],
)
def test_cli_user_errors_are_one_line(args, match, tmp_path, capsys):
    (tmp_path / "user_loss.py").write_text(USER_MODULE)
    argv = ["conformance"] + [a.format(file=tmp_path / "user_loss.py", dir=tmp_path) for a in args]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and match in err and "\n" not in err, err


def test_cli_audits_a_users_function(tmp_path, capsys, monkeypatch):
    """MODULE:FUNCTION from the working directory; exit 0 for a conforming loss, 1 otherwise; JSON and Markdown files."""
    (tmp_path / "user_loss.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli_main(["conformance", "user_loss:good", "--json", "card.json", "--markdown", "card.md"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CONFORMS: all 15 checks match the paper")
    card = ReportCard.from_dict(json.loads((tmp_path / "card.json").read_text()))
    assert card.passed and card.name == "user_loss:good"
    assert (tmp_path / "card.md").read_text() == card.to_markdown()
    assert cli_main(["conformance", "user_loss:no_four", "--name", "no four"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == ["DIFFERS in 2 of 15 checks (float64, token level)",
                                    "  - on-policy gradient factor 0.25 / 0.25 instead of 1: a factor 4 is missing "
                                    "(or the loss is / 4)"]
