"""Chapters 6-9's coded exercises judged without a kernel: the reference passes, two right answers written
independently (another formula, another order, float32) pass, the stub is "not done yet", and every registered
mistake fails with its own name in the message.

The right answers below are plain re-derivations from the chapters' formulas, not calls of the references:
a reference that drifted from the mathematics (a wrong peak, a sequence ratio read at a padding position, a
gradient of the wrong loss) rejects them. A check that accepts too much (a shape test, a tolerance wider than a
mistake's effect) lets a registered mistake pass; a mistake that matches a different entry names the wrong fix.
"""

from __future__ import annotations

import math

import pytest
import torch

from sapo_lab.course.checks import CheckFailed, run_check
from sapo_lab.course.exercises import ch06, ch07, ch08, ch09, exercise

IDS = ["06.coefficient", "06.peak", "07.token_scale", "07.logit_ascent", "08.sequence_ratio", "08.sequence_grad",
       "09.vector_error"]


def _sech2(x):
    return 1.0 / torch.cosh(x) ** 2


# ---- right answers, two per exercise ---------------------------------------------------------------------------
def coefficient_sigmoid(ratio, tau):
    s = torch.sigmoid(tau * (ratio - 1))
    return 4 * ratio * s * (1 - s)


def coefficient_float32(ratio, tau):
    r = ratio.float()
    return r * (1 - torch.tanh(tau * (r - 1) / 2) ** 2)


def peak_bisection(tau):
    lo, hi = 1.0, 1.0 + 3.0 / tau
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tau * mid * math.tanh(tau * (mid - 1) / 2) < 1 else (lo, mid)
    r = (lo + hi) / 2
    return r, r / math.cosh(tau * (r - 1) / 2) ** 2


def peak_newton_float32(tau):
    """Newton's method on tau r tanh(tau (r - 1) / 2) - 1 from the right of the root, in float32."""
    r = torch.tensor(1.0 + 3.0 / tau, dtype=torch.float32)
    for _ in range(60):
        x = tau * (r - 1) / 2
        f = tau * r * torch.tanh(x) - 1
        df = tau * torch.tanh(x) + tau * r * (tau / 2) * _sech2(x)
        r = r - f / df
    return torch.stack([r, r * _sech2(tau * (r - 1) / 2)])


def token_scale_where(ratio, advantage, tau_pos, tau_neg):
    tau = torch.where(advantage > 0, tau_pos, tau_neg)
    return advantage * ratio * _sech2(tau * (ratio - 1) / 2)


def token_scale_loop(ratio, advantage, tau_pos, tau_neg):
    values = [a * r / math.cosh((tau_pos if a > 0 else tau_neg) * (r - 1) / 2) ** 2
              for r, a in zip(ratio.flatten().tolist(), advantage.flatten().tolist(), strict=True)]
    return torch.tensor(values, dtype=torch.float64).reshape(ratio.shape)


def ascent_closed_form(logits, sampled, ratio, advantage, tau_pos, tau_neg):
    p = torch.softmax(logits, -1)
    e_a = torch.nn.functional.one_hot(sampled, logits.shape[-1])
    return token_scale_where(ratio, advantage, tau_pos, tau_neg)[:, None] * (e_a - p)


def ascent_autograd_float32(logits, sampled, ratio, advantage, tau_pos, tau_neg):
    z = logits.float().requires_grad_(True)
    (score,) = torch.autograd.grad(torch.log_softmax(z, -1).gather(1, sampled[:, None]).sum(), z)
    return token_scale_where(ratio, advantage, tau_pos, tau_neg).float()[:, None] * score


def ratio_masked_mean(logp, behavior_logp, mask):
    z = torch.where(mask > 0, logp - behavior_logp, torch.zeros_like(logp))
    return torch.exp(z.sum(-1) / mask.sum(-1))


def ratio_root_of_product(logp, behavior_logp, mask):
    ratios = torch.where(mask > 0, torch.exp(logp - behavior_logp), torch.ones_like(logp))
    return ratios.prod(-1) ** (1 / mask.sum(-1))


def grad_closed_form(logp, behavior_logp, advantages, mask, tau_pos, tau_neg):
    lengths = mask.sum(-1)
    s = torch.exp(((logp - behavior_logp) * mask).sum(-1) / lengths)
    tau = torch.where(advantages > 0, tau_pos, tau_neg)
    c = s * _sech2(tau * (s - 1) / 2)
    return (-advantages * c / (len(s) * lengths))[:, None] * mask


def grad_by_own_autograd(logp, behavior_logp, advantages, mask, tau_pos, tau_neg):
    x = logp.detach().clone().requires_grad_(True)
    mu = ((x - behavior_logp) * mask).sum(-1) / mask.sum(-1)
    tau = torch.where(advantages > 0, tau_pos, tau_neg)
    surrogate = 4 / tau * torch.sigmoid(tau * (torch.exp(mu) - 1))
    (g,) = torch.autograd.grad(-(advantages * surrogate).mean(), x)
    return g


def vector_error_direct(z, H, tau):
    r, s = z.exp(), z.mean().exp()
    return (r * _sech2(tau * (r - 1) / 2)) @ H / len(z) - s * _sech2(tau * (s - 1) / 2) * H.mean(0)


def vector_error_by_terms_float32(z, H, tau):
    """Covariance term plus scalar-gap term (eq-09-decomposition), in float32."""
    r, Hf = z.float().exp(), H.float()
    c = r * _sech2(tau * (r - 1) / 2)
    s = z.float().mean().exp()
    cov = ((c - c.mean())[:, None] * Hf).mean(0)
    return cov + (c.mean() - s * _sech2(tau * (s - 1) / 2)) * Hf.mean(0)


RIGHT = {
    "06.coefficient": (coefficient_sigmoid, coefficient_float32),
    "06.peak": (peak_bisection, peak_newton_float32),
    "07.token_scale": (token_scale_where, token_scale_loop),
    "07.logit_ascent": (ascent_closed_form, ascent_autograd_float32),
    "08.sequence_ratio": (ratio_masked_mean, ratio_root_of_product),
    "08.sequence_grad": (grad_closed_form, grad_by_own_autograd),
    "09.vector_error": (vector_error_direct, vector_error_by_terms_float32),
}


def test_the_chapters_register_the_exercises_their_check_cells_name():
    """Catches an exercise dropped from a chapter's registry (the notebook's check would raise KeyError)."""
    registered = [ex.id for module in (ch06, ch07, ch08, ch09) for ex in module.EXERCISES]
    assert registered == IDS


@pytest.mark.parametrize("exercise_id", IDS)
def test_the_reference_and_two_other_right_answers_pass(exercise_id, capsys):
    """Catches a tolerance that rejects float32 or another order of operations, and a reference that disagrees
    with the chapter's formula (the right answers here are written from the formula, not from the reference)."""
    ex = exercise(exercise_id)
    assert run_check(ex, ex.reference) is True
    for right in RIGHT[exercise_id]:
        assert run_check(ex, right) is True, right.__name__
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("exercise_id", IDS)
def test_the_stub_is_not_done_yet(exercise_id, capsys):
    """Catches a check that fails (or passes) on the student notebook's stub instead of letting it run on."""
    def stub(**_):
        raise NotImplementedError("your code here")

    assert run_check(exercise(exercise_id), stub) is False
    assert "not done yet" in capsys.readouterr().out


CASES = [(ex_id, i) for ex_id in IDS for i in range(len(exercise(ex_id).mistakes))]


@pytest.mark.parametrize(("exercise_id", "index"), CASES, ids=[f"{e}-{i}" for e, i in CASES])
def test_each_registered_mistake_fails_with_its_own_name(exercise_id, index):
    """Catches cases on which a mistake agrees with the right answer (it would pass), and two mistakes the cases
    cannot tell apart (the message would name the first of them, with the wrong fix)."""
    ex = exercise(exercise_id)
    mistake = ex.mistakes[index]
    with pytest.raises(CheckFailed) as failed:
        run_check(ex, mistake.compute)
    message = str(failed.value)
    assert f"Known mistake: {mistake.name}." in message
    assert "input:" in message and "expected:" in message


def test_a_sequence_ratio_cut_off_from_autograd_is_named_as_detached():
    """Catches a check that compares values only: .item() per response gives the right numbers, no gradient."""
    def detached(logp, behavior_logp, mask):
        return torch.tensor([math.exp((lp - b)[m > 0].mean().item())
                             for lp, b, m in zip(logp, behavior_logp, mask, strict=True)], dtype=torch.float64)

    with pytest.raises(CheckFailed, match="no gradient reaches logp"):
        run_check(exercise("08.sequence_ratio"), detached)


def test_a_peak_found_on_a_grid_is_not_accurate_enough():
    """Catches a tolerance so loose that a grid of step 1e-3 passes for the seven significant digits the
    statement asks for."""
    def on_a_grid(tau):
        grid = torch.arange(1e-3, 12.0, 1e-3, dtype=torch.float64)
        c = grid * _sech2(tau * (grid - 1) / 2)
        k = int(c.argmax())
        return float(grid[k]), float(c[k])

    with pytest.raises(CheckFailed, match="coefficient_peak is not right yet"):
        run_check(exercise("06.peak"), on_a_grid)


def test_a_peak_within_the_stated_accuracy_passes():
    """The statement asks for a relative error below 1e-5: a minimiser stopped at 5e-6 (as scipy's bounded
    search may be with its default tolerance) must pass."""
    def close_enough(tau):
        r, c = peak_bisection(tau)
        return r * (1 + 5e-6), c * (1 - 5e-6)

    assert run_check(exercise("06.peak"), close_enough) is True


def test_the_temperature_at_a_zero_advantage_is_a_free_choice():
    """The statement leaves tau at A = 0 open (the token's step is 0 either way): a student who takes tau_pos
    there (A >= 0) must pass too."""
    def at_zero_positive(ratio, advantage, tau_pos, tau_neg):
        tau = torch.where(advantage >= 0, tau_pos, tau_neg)
        return advantage * ratio * _sech2(tau * (ratio - 1) / 2)

    assert run_check(exercise("07.token_scale"), at_zero_positive) is True


def test_a_sequence_ratio_that_multiplies_padding_by_the_mask_is_named():
    """The statement lets padding hold -inf; -inf * 0 is nan. Catches cases whose padding is finite (there the
    product passes for right) and a message that blames a division by zero instead of the masking."""
    def by_product(logp, behavior_logp, mask):
        return (((logp - behavior_logp) * mask).sum(1) / mask.sum(1)).exp()

    with pytest.raises(CheckFailed, match="padding removed by multiplying by the mask") as failed:
        run_check(exercise("08.sequence_ratio"), by_product)
    assert "-inf" in str(failed.value)  # the input shown is the batch that holds it
