"""The card's causes are as true as its verdicts: losses an outside tester wrote, each plainly, in a user's module.

Every loss is the paper's -(4/tau) sigmoid(tau (r - 1)) A with a per-response mean, changed in one place; each test
names the false cause, or the missing sentence, that the audit gave before.
"""

from __future__ import annotations

import json

import pytest
from _user_module import install_user_module, run_conformance

from sapo_lab.conformance import AGGREGATION, BATCH, ON_POLICY, ZERO_ADVANTAGE, AdapterError, ReportCard, audit
from sapo_lab.conformance.card import WIDTH

LOSSES = '''
import math
import os
import random
import sys

import torch


def _tau(A):
    return torch.where(A > 0, torch.full_like(A, 1.0), torch.full_like(A, 1.05))


def _mean(token, mask):
    m = mask.to(token.dtype)
    return ((token * m).sum(1) / m.sum(1).clamp(min=1)).mean()


def paper(logp, old_logp, advantages, mask):
    A = advantages[:, None]
    r = torch.exp(logp - old_logp.detach())
    return _mean(-A * (4 / _tau(A)) * torch.sigmoid(_tau(A) * (r - 1)), mask)


def written_with_expm1(logp, old_logp, advantages, mask):
    A = advantages[:, None]
    z = logp - old_logp.detach()
    return _mean(-A * (4 / _tau(A)) * torch.sigmoid(_tau(A) * torch.expm1(z)), mask)


def random_scale(logp, old_logp, advantages, mask):
    return paper(logp, old_logp, advantages, mask) * (1 + 0.1 * random.random())


CALLS = [0]


def keeps_state(logp, old_logp, advantages, mask):
    CALLS[0] += 1
    return paper(logp, old_logp, advantages, mask) * (1 + 1 / CALLS[0])


print("loading the loss module")


def chatty(logp, old_logp, advantages, mask):
    for i in range(20):
        print("debug", i, logp.shape)
    print("a warning", file=sys.stderr)
    os.write(1, b"from native code\\n")
    return paper(logp, old_logp, advantages, mask)


def prints_only(logp, old_logp, advantages, mask):
    print("chatter")
    return paper(logp, old_logp, advantages, mask)


def float32_fast_path(logp, old_logp, advantages, mask):
    if logp.dtype != torch.float32:
        return paper(logp, old_logp, advantages, mask)
    A = advantages[:, None]
    r = torch.exp(logp - old_logp.detach())
    token = -A * (4 / _tau(A)) * torch.sigmoid(_tau(A) * (r - 1))
    m = mask.to(token.dtype)
    return (token * m).sum() / m.sum().clamp(min=1)


def halved_log_ratio(logp, old_logp, advantages, mask):
    return paper(logp / 2, old_logp / 2, advantages, mask)


def advantages_over_max(logp, old_logp, advantages, mask):
    return paper(logp, old_logp, advantages / advantages.abs().max(), mask)


def log2_log_probs(logp, old_logp, advantages, mask):
    return paper(logp / math.log(2), old_logp / math.log(2), advantages, mask)


def gradient_halved_by_a_detach(logp, old_logp, advantages, mask):
    value = paper(logp, old_logp, advantages, mask)
    return value - 0.5 * (value - value.detach())


def value_as_weight(logp, old_logp, advantages, mask):
    A = advantages[:, None]
    r = torch.exp(logp - old_logp).detach()
    return _mean(-A * (4 / _tau(A)) * torch.sigmoid(_tau(A) * (r - 1)) * logp, mask)


def with_kl_penalty(logp, old_logp, advantages, mask):
    z = logp - old_logp.detach()
    return paper(logp, old_logp, advantages, mask) + 0.1 * _mean(torch.exp(-z) + z - 1, mask)


def with_entropy_bonus(logp, old_logp, advantages, mask):
    return paper(logp, old_logp, advantages, mask) + 0.01 * _mean(logp, mask)


def tau_from_first_response(logp, old_logp, advantages, mask):
    A = advantages[:, None]
    r = torch.exp(logp - old_logp.detach())
    tau = 1.0 if advantages[0] > 0 else 1.05
    return _mean(-A * (4 / tau) * torch.sigmoid(tau * (r - 1)), mask)


def tau_by_sign_of_product(logp, old_logp, advantages, mask):
    A = advantages[:, None]
    r = torch.exp(logp - old_logp.detach())
    tau = torch.where(A * (r - 1) > 0, torch.ones_like(r), torch.full_like(r, 1.05))
    return _mean(-A * (4 / tau) * torch.sigmoid(tau * (r - 1)), mask)
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    return install_user_module(tmp_path, monkeypatch, "tester_losses", LOSSES)


def _run(argv, capsys):
    code, out, err = run_conformance(argv, capsys)
    if "--json" not in argv:
        assert not [line for line in out.splitlines() if len(line) > WIDTH], out
    return code, out, err


def _first_difference(out: str) -> str:
    """The first line of a difference (the module's own print at import adds a note above it)."""
    return next(line for line in out.splitlines() if line.startswith("  - "))


def _card(name, **kw):
    import tester_losses

    return audit(getattr(tester_losses, name), **kw)


# ---- a loss that is not a function of its batch ----

@pytest.mark.parametrize("name", ["random_scale", "keeps_state"])
def test_a_random_or_stateful_loss_cannot_be_audited(name, user_dir, capsys):
    """Catches a card with made-up causes (a detached weight, a clamp, an unknown aggregation) for a loss that
    answers the same batch differently on two calls: one line, exit 2, saying so."""
    code, out, err = _run([f"tester_losses:{name}"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert "the loss is not deterministic: two calls on the same batch" in err, err
    with pytest.raises(AdapterError, match="not deterministic"):
        _card(name)


def test_tau_from_the_first_response_is_said_to_depend_on_batch_order(user_dir, capsys):
    """Catches the order dependence going unseen (it read as an importance-sampling-level problem): the first
    difference says the batch's order matters, and no other line names a cause."""
    code, out, _ = _run(["tester_losses:tau_from_first_response"], capsys)
    assert code == 1 and _first_difference(out).startswith("  - the loss depends on the batch's order"), out
    assert "response-level statistic" not in out and "importance-sampling level: per-token" in out, out
    card = _card("tau_from_first_response", dtype="float64")
    assert card.lead == BATCH and card.row(BATCH).values["order"]["value_gap"] > 1e-2


def test_the_paper_passes_the_order_and_size_check_under_every_aggregation():
    """The check's false alarm: reversing the batch or halving it must not move a per-response mean, a token
    pool or a sum (each half's share differs between them). Expected shares worked out by hand: per-response
    mean 2/4 per half; token pool 4/10 and 6/10 of the tokens (lengths 3+1 and 4+2); a sum 1."""
    import torch

    def gate(logp, old_logp, advantages, mask):
        A = advantages[:, None]
        tau = torch.where(A > 0, torch.full_like(A, 1.0), torch.full_like(A, 1.05))
        return -A * (4 / tau) * torch.sigmoid(tau * (torch.exp(logp - old_logp) - 1)) * mask

    pool = audit(lambda lp, o, a, m: gate(lp, o, a, m).sum() / m.sum(), dtype="float64")
    summed = audit(lambda lp, o, a, m: gate(lp, o, a, m).sum(), dtype="float64")
    for card, shares in ((pool, [0.4, 0.6]), (summed, [1.0, 1.0])):
        row = card.row(BATCH)
        assert row.verdict == "pass" and row.values["size"]["factors"] == pytest.approx(shares), row
    import tester_losses

    assert audit(tester_losses.paper, dtype="float64").row(BATCH).values["size"]["factors"] == pytest.approx(
        [0.5, 0.5])


# ---- the loss's own output ----

def test_a_printing_loss_keeps_the_verdict_first_and_json_valid(user_dir, capsys):
    """Catches the loss's 20 prints per call (Python and the file descriptor alike) pushing the verdict down,
    and --json stdout that is no longer JSON."""
    code, out, err = _run(["tester_losses:chatty"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("CONFORMS"), out
    assert "debug" not in out + err and "from native code" not in out + err and "loading" not in out + err
    note = lines[1]
    assert note.startswith("  note: the loss (with its module) printed ") and "not shown" in note, out
    printed = int(note.split("printed ")[1].split(" line")[0].replace(",", ""))
    assert printed > 22 * 100  # about 100 calls a precision, 22 lines each, plus the module's one
    code, out, _ = _run(["tester_losses:chatty", "--json"], capsys)
    card = json.loads(out)
    assert code == 0 and card["passed"] and "printed" in card["meta"]["loss_output"]


def test_without_fork_the_loss_output_is_counted_too(user_dir, capsys, monkeypatch):
    """Where the system cannot fork, the audit runs in this process: catches the loss's prints reaching the card
    there (Python-level output is counted the same way)."""
    import os

    monkeypatch.delattr(os, "fork")
    code, out, err = _run(["tester_losses:prints_only", "--dtype", "float64"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("CONFORMS") and "chatter" not in out + err, out
    assert lines[1].startswith("  note: the loss (with its module) printed "), out


# ---- rounding is not a difference ----

def test_expm1_for_r_minus_1_conforms_in_float64_and_float32(user_dir):
    """expm1's gradient, expm1(z) + 1, rounds e^z to an absolute 1e-16 (float64) or 6e-8 (float32) of the
    on-policy gradient where e^z is tiny: catches DIFFERS for that rounding. In float32 its card is the plain
    loss's (whose one difference is exp overflowing float32 above log r = 88.72), and the default audit,
    float64 with float32 and bfloat16 beside it, conforms."""
    for dtype in ("float64", "float32"):
        ours, plain = _card("written_with_expm1", dtype=dtype), _card("paper", dtype=dtype)
        assert ours.verdicts() == plain.verdicts(), (dtype, ours.to_text())
    assert _card("written_with_expm1", dtype="float64").passed
    card = _card("written_with_expm1")
    assert card.passed and set(card.precisions) == {"float32", "bfloat16"}, card.to_text()
    assert "allowance (float64): a difference up to 1e-09" in card.meta["allowance"]


# ---- the training precision ----

def test_a_float32_fast_path_is_caught_by_default(user_dir, capsys):
    """A token pool taken only when the log-probs are float32: catches a default audit in float64 alone, which
    conforms. The first line counts it, and the lines below name the precision and the aggregation."""
    code, out, _ = _run(["tester_losses:float32_fast_path"], capsys)
    lines = out.splitlines()
    assert code == 1 and lines[0] == "DIFFERS in 1 of 15 checks (float64, token level; 1 of them only in float32)"
    assert _first_difference(out).startswith("  - in float32 only: aggregation: one mean over the batch's token pool")
    assert any(line.startswith("  float32: differs where float64 conforms: aggregation") for line in lines), out
    card = _card("float32_fast_path")
    assert card.precision_differences()[0][:2] == ("float32", AGGREGATION)
    assert _card("float32_fast_path", dtype="float64").passed  # asked for float64 alone, it conforms there


# ---- causes the rest of the card contradicts ----

@pytest.mark.parametrize("name,factor,because", [
    ("halved_log_ratio", 0.5, "the gradient's shape across r differs too"),
    ("advantages_over_max", 0.5, "the aggregation probes, where every A = 1, measured 1"),
    ("log2_log_probs", 1 / 0.6931471805599453, "the gradient's shape across r differs too"),
    ("gradient_halved_by_a_detach", 0.5, "the value's derivative differs from the applied gradient too"),
])
def test_a_factor_is_not_given_a_cause_the_card_contradicts(name, factor, because, user_dir):
    """Catches "a 2/tau prefactor" for a halved log-ratio (its shape differs), for A / max|A| (the factor is 1
    where every A = 1) and for a gradient halved behind a detach (the value keeps the paper's slope), and "a
    normaliser, or a learning-rate change" for log2 log-probs (a factor 1/ln 2 = 1.443 whose shape differs too):
    the line gives the factor and what contradicts a constant, no cause."""
    row = _card(name, dtype="float64").row(ON_POLICY)
    assert row.values["factor_pos"] == pytest.approx(factor) == row.values["factor_neg"]
    assert because in row.summary, row.summary
    for cause in ("2/tau", "normaliser", "learning-rate", "factor 4"):
        assert cause not in row.summary, row.summary


@pytest.mark.parametrize("name,gradient", [("with_kl_penalty", 0.0387), ("with_entropy_bonus", 0.00333)])
def test_a_term_without_the_advantage_is_named_as_such(name, gradient, user_dir, capsys):
    """Catches "the advantage is shifted or rescaled" for a KL penalty (k3, 0.1 times) and an entropy bonus
    (0.01 mean log p): with every A = 0 the paper's gradient is 0 and theirs is not. The expected sizes: the
    entropy bonus's gradient is 0.01 / L for the one-token response (1/3 of 0.01 for L = 3); the KL's,
    0.1 (1 - e^-z) / L at its largest, z = -1.5 in a response of 3: 0.1 * (e^1.5 - 1) / 3 = 0.1161 / 3."""
    code, out, _ = _run([f"tester_losses:{name}", "--dtype", "float64"], capsys)
    assert code == 1 and _first_difference(out).startswith("  - a term that does not depend on the advantage"), out
    assert "shifted" not in out and "rescaled" not in out and "a detached weight" not in out, out
    card = _card(name, dtype="float64")
    assert card.lead == ZERO_ADVANTAGE
    assert card.row(ZERO_ADVANTAGE).values["group_max_abs_grad"] == pytest.approx(gradient, rel=1e-2)


def test_a_shifted_advantage_is_still_told_from_a_term_without_it():
    """The false alarm of the new reading: A + 0.1 inside the loss is SAPO at A = 0.1 where A = 0, a shifted
    advantage, not a term independent of A (catches every nonzero A = 0 gradient read as a KL penalty)."""
    import torch

    def shifted(logp, old_logp, advantages, mask):
        A = advantages[:, None] + 0.1
        tau = torch.where(A > 0, torch.full_like(A, 1.0), torch.full_like(A, 1.05))
        token = -A * (4 / tau) * torch.sigmoid(tau * (torch.exp(logp - old_logp) - 1)) * mask
        return (token.sum(1) / mask.sum(1).clamp(min=1)).mean()

    row = audit(shifted, dtype="float64").row(ZERO_ADVANTAGE)
    assert row.verdict == "differs" and "advantage_free_term" not in row.values
    assert row.values["advantage_shift"] == pytest.approx(0.1) and "shifted" in row.summary


def test_a_cause_the_whole_card_agrees_with_is_still_named(user_dir):
    """The gate's value used as a constant weight on log p: on-policy factor f(1) = 2/tau and shape f(r) tell one
    story, so both lines name it (catches the agreement rule withholding causes the card confirms)."""
    card = _card("value_as_weight", dtype="float64")
    assert "2/tau = f(1), the surrogate's value, not its slope" in card.row(ON_POLICY).summary, card.to_text()
    assert "g(r) is f(r)" in card.row("gradient shape r*w_tau(r)").summary, card.to_text()


def test_tau_by_the_sign_of_a_times_r_minus_1_is_named_for_both_signs(user_dir):
    """For A > 0 this rule is "tau_pos where r > 1", for A < 0 its reverse: catches the one-sign reading "tau
    chosen by the side of r = 1", which the A < 0 half of the card contradicts."""
    summary = _card("tau_by_sign_of_product", dtype="float64").row("gradient shape r*w_tau(r)").summary
    assert "tau chosen by the sign of A (r - 1)" in summary and "side of r = 1" not in summary, summary


def test_a_card_round_trips_with_its_precisions_and_lead(user_dir):
    card = _card("float32_fast_path")
    back = ReportCard.from_dict(json.loads(card.to_json()))
    assert back.to_dict() == card.to_dict() and back.passed is False and back.precisions == card.precisions
