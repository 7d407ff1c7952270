"""The checks of chapters 2-5's coded exercises, judged without a kernel (the fast guard; the notebook harness,
tests/course/test_exercise_checks.py, runs the same checks on the notebooks' own answers).

For every exercise: the reference passes; two right answers written differently (another formula, another
order of operations, float32) pass, which catches a tolerance too tight for a right answer or a case where the
reference is not what the statement asks; every registered mistake fails and is named, which catches a case
set on which a mistake agrees with the reference (the check would accept it) and a mistake that another
mistake's message shadows. A stub reports "not done yet" instead of failing.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from sapo_lab.course.checks import CheckFailed, run_check
from sapo_lab.course.exercises import exercise
from sapo_lab.course.exercises.ch02 import EXERCISES as CH02
from sapo_lab.course.exercises.ch03 import EXERCISES as CH03
from sapo_lab.course.exercises.ch04 import EXERCISES as CH04
from sapo_lab.course.exercises.ch05 import EXERCISES as CH05

ALL = [*CH02, *CH03, *CH04, *CH05]


# ---- right answers written independently of the references ------------------------------------------------------
def logprob_by_logsumexp(logits, tokens, mask):
    picked = torch.take_along_dim(logits, tokens[..., None], dim=-1)[..., 0]
    per_token = picked - torch.logsumexp(logits, dim=-1)
    return torch.where(mask.bool(), per_token, torch.zeros_like(per_token)).sum(-1)


def logprob_loop_float32(logits, tokens, mask):
    totals = []
    for i in range(logits.shape[0]):
        total = torch.zeros((), dtype=torch.float32)
        for t in range(logits.shape[1]):
            if mask[i, t] > 0:
                total = total + torch.log(torch.softmax(logits[i, t].float(), -1)[tokens[i, t]])
        totals.append(total)
    return torch.stack(totals)


def score_by_eye(logits, actions):
    return torch.eye(logits.shape[-1], dtype=logits.dtype)[actions] - torch.softmax(logits, -1)


def score_float32_in_place(logits, actions):
    z = (logits - logits.max(-1, keepdim=True).values).float()
    score = -(torch.exp(z) / torch.exp(z).sum(-1, keepdim=True))
    score[torch.arange(len(actions)), actions] += 1.0
    return score


def advantages_mean_of_squares(rewards, eps=1e-6):
    centred = rewards - rewards.mean(-1, keepdim=True)
    return centred / ((centred**2).mean(-1, keepdim=True).sqrt() + eps)


def advantages_by_statistics(rewards, eps=1e-6):
    rows = []
    for row in rewards.tolist():
        mean, spread = statistics.fmean(row), statistics.pstdev(row)
        rows.append([(x - mean) / (spread + eps) for x in row])
    return torch.tensor(rows, dtype=torch.float64)


def masked_mean_by_indexing(values, mask, aggregation="per_response"):
    keep = mask.bool()
    if aggregation == "token_pool":
        return values[keep].mean()
    return torch.stack([row[m].mean() for row, m in zip(values, keep, strict=True)]).mean()


def masked_mean_float32_weights(values, mask, aggregation="per_response"):
    m = mask.float()
    alpha = m / (m.sum(1, keepdim=True) * m.shape[0]) if aggregation == "per_response" else m / m.sum()
    return (torch.where(m > 0, values.float(), 0.0) * alpha).sum()


def ratio_by_expm1(logp, behavior_logp):
    return 1 + torch.expm1(logp - behavior_logp.detach())


def ratio_float32_no_grad(logp, behavior_logp):
    with torch.no_grad():
        frozen = behavior_logp.float()
    return torch.exp(logp.float() - frozen)


def clipped_by_sign(ratio, adv, eps_low, eps_high):
    return torch.where(adv > 0, adv * torch.clamp(ratio, max=1 + eps_high), adv * torch.clamp(ratio, min=1 - eps_low))


def clipped_by_live_mask_float32(ratio, adv, eps_low, eps_high):
    r, a = ratio.float(), adv.float()
    live = ((a > 0) & (r < 1 + eps_high)) | ((a < 0) & (r > 1 - eps_low))
    return torch.where(live, r * a, torch.where(a > 0, 1 + eps_high, 1 - eps_low) * a)


def gate_by_exp(ratio, tau):
    return 4 / tau / (1 + torch.exp(-tau * (ratio - 1)))


def gate_by_logsigmoid_float32(ratio, tau):
    return 4 / tau * torch.exp(torch.nn.functional.logsigmoid(tau * (ratio.float() - 1)))


def weight_symmetric(ratio, tau):
    u = tau * (ratio - 1)
    return 4 * torch.sigmoid(u) * torch.sigmoid(-u)


def weight_sech_float32(ratio, tau):
    return 1 / torch.cosh(tau * (ratio.float() - 1) / 2) ** 2


def objective_loop(ratio, adv, tau_pos, tau_neg):
    rows = []
    for r_i, a_i in zip(ratio, adv, strict=True):
        tau = tau_pos if a_i > 0 else tau_neg
        rows.append(a_i * 4 / tau * torch.sigmoid(tau * (r_i - 1)))
    return torch.stack(rows)


def objective_mixed_float32(ratio, adv, tau_pos, tau_neg):
    pos = (adv > 0).float()[:, None]
    tau = pos * tau_pos + (1 - pos) * tau_neg
    return adv.float()[:, None] * (4 / tau) * torch.sigmoid(tau * (ratio.float() - 1))


RIGHT = {
    "02.response_logprob": (logprob_by_logsumexp, logprob_loop_float32),
    "02.softmax_score": (score_by_eye, score_float32_in_place),
    "03.advantages": (advantages_mean_of_squares, advantages_by_statistics),
    "03.masked_mean": (masked_mean_by_indexing, masked_mean_float32_weights),
    "04.ratio": (ratio_by_expm1, ratio_float32_no_grad),
    "04.clipped_surrogate": (clipped_by_sign, clipped_by_live_mask_float32),
    "05.f_tau": (gate_by_exp, gate_by_logsigmoid_float32),
    "05.w_tau": (weight_symmetric, weight_sech_float32),
    "05.sapo_objective": (objective_loop, objective_mixed_float32),
}


def _verdict(ex, fn, capsys) -> tuple[bool | None, str]:
    """(True, printed) on a pass, (False, printed) on "not done yet", (None, message) on a failure."""
    try:
        ok = run_check(ex, fn)
    except CheckFailed as failed:
        return None, str(failed)
    return ok, capsys.readouterr().out


def test_every_exercise_of_the_four_chapters_has_two_right_answers_here():
    assert sorted(RIGHT) == sorted(ex.id for ex in ALL)
    assert {ex.id.split(".")[0] for ex in ALL} == {"02", "03", "04", "05"}


@pytest.mark.parametrize("ex", ALL, ids=lambda ex: ex.id)
def test_the_reference_and_two_other_right_answers_pass(ex, capsys):
    """Catches a tolerance that rejects float32 or another formula, and a reference that disagrees with the
    formula written out by hand."""
    for fn in (ex.reference, *RIGHT[ex.id]):
        ok, text = _verdict(ex, fn, capsys)
        assert ok is True, f"{ex.id}: {getattr(fn, '__name__', fn)} rejected:\n{text}"
        assert "correct" in text


@pytest.mark.parametrize("ex", ALL, ids=lambda ex: ex.id)
def test_every_registered_mistake_fails_with_its_own_name(ex, capsys):
    """Catches a mistake the fresh inputs cannot tell from the right answer, and a message naming another
    mistake than the one made."""
    assert len(ex.mistakes) >= 2
    for mistake in ex.mistakes:
        ok, text = _verdict(ex, mistake.compute, capsys)
        assert ok is None, f"{ex.id}: the mistake '{mistake.name}' passes"
        assert f"Known mistake: {mistake.name}." in text, text
        assert mistake.fix in text


@pytest.mark.parametrize("ex", ALL, ids=lambda ex: ex.id)
def test_a_stub_is_not_done_yet(ex, capsys):
    def stub(**_):
        raise NotImplementedError("your code here")

    ok, text = _verdict(ex, stub, capsys)
    assert ok is False and "not done yet" in text


def test_the_ratio_check_names_a_detach_on_the_wrong_tensor_by_the_gradient_alone(capsys):
    """The values of exp(logp.detach() - b) are right: only the gradient comparison can catch it."""
    ok, text = _verdict(exercise("04.ratio"), lambda logp, behavior_logp: torch.exp(logp.detach() - behavior_logp),
                        capsys)
    assert ok is None and "the detach on the wrong tensor" in text


def test_the_objective_check_catches_tau_chosen_by_the_ratio_even_with_the_papers_close_temperatures(capsys):
    """tau_pos = 1 and tau_neg = 1.05 differ by 5%: the check must still see the ratio-side rule on those
    inputs alone (here on a case whose advantages and ratios disagree in sign on some tokens)."""
    ex = exercise("05.sapo_objective")
    case = ex.cases()[0]
    assert (case["tau_pos"], case["tau_neg"]) == (1.0, 1.05)
    a = case["adv"][:, None].expand_as(case["ratio"])
    disagree = ((a > 0) & (case["ratio"] <= 1)) | ((a < 0) & (case["ratio"] > 1))
    assert bool(disagree.any())
    by_ratio = torch.where(case["ratio"] > 1, 1.0, 1.05)
    by_sign = torch.where(a > 0, 1.0, 1.05)
    ratio_side = a * 4 / by_ratio * torch.sigmoid(by_ratio * (case["ratio"] - 1))
    right = a * 4 / by_sign * torch.sigmoid(by_sign * (case["ratio"] - 1))
    assert float((ratio_side - right).abs().max()) > 1e-3


def test_w_tau_cases_hold_r_equal_one_where_the_weight_is_one():
    """w_tau(1) = 1 is what the factor 4 / tau buys; the check's inputs must contain r = 1 for several tau."""
    taus = set()
    for case in exercise("05.w_tau").cases():
        if bool((case["ratio"] == 1.0).any()) and not torch.is_tensor(case["tau"]):
            taus.add(case["tau"])
    assert len(taus) >= 3


def test_the_ratio_check_refuses_probabilities_divided_where_they_underflow(capsys):
    """exp(logp) / exp(b) is the ratio on paper but 0/0 for a token of probability e^-800: the statement asks for
    log space, and the check has such a token."""
    ok, text = _verdict(exercise("04.ratio"), lambda logp, behavior_logp: torch.exp(logp) / torch.exp(
        behavior_logp.detach()), capsys)
    assert ok is None and "the probabilities divided" in text
