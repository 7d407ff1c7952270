"""The mistake catalogue's own outputs, worked out by hand on inputs whose axes differ (B = 2 responses of
T = 3 tokens, a 2 x 2 reward table that is not symmetric), and describe_difference's words where a factor
prints as 1 or two numbers part only in their 13th digit. Each test names the mistake it catches."""

from __future__ import annotations

import math

import torch

from sapo_lab.course import mistakes
from sapo_lab.course.mistakes import MISTAKES, describe_difference


def double(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def named(topic: str, words: str):
    (found,) = [m for m in MISTAKES[topic] if words in m.name]
    return found.compute


VALUES = double([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = double([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # lengths 2 and 1 of T = 3


def test_the_padded_denominator_mistake_divides_by_t():
    """catches: the mistake dividing by B (shape[0] = 2) instead of T (shape[-1] = 3). Masked sums 3 and 4,
    each over T = 3, averaged: (1 + 4/3) / 2 = 7/6; pooled: 7 over B * T = 6 tokens, also 7/6."""
    compute = named("masked_mean", "padding counted in the denominator")
    assert math.isclose(float(compute(VALUES, MASK, "per_response")), 7 / 6, rel_tol=1e-12)
    assert math.isclose(float(compute(VALUES, MASK, "token_pool")), 7 / 6, rel_tol=1e-12)


def test_the_swapped_aggregation_mistake_of_the_clip_loss_pools_per_response():
    """catches: the swap switch inverted in the loss's mean (the swapped mistake computing the right
    aggregation). On-policy (r = 1) the clip loss per token is -A: A = (1, -2) gives per response
    mean(-1, 2) = 0.5 and pooled (-1 - 1 + 2) / 3 = 0; the swapped mistake gives the other one."""
    compute = named("clipped_surrogate_loss", "aggregations swapped")
    logp = torch.zeros(2, 3, dtype=torch.float64)
    kw = dict(logp=logp, behavior_logp=logp.clone(), advantages=double([1.0, -2.0]), mask=MASK)
    assert math.isclose(float(compute(**kw, aggregation="per_response")), 0.0, abs_tol=1e-12)
    assert math.isclose(float(compute(**kw, aggregation="token_pool")), 0.5, rel_tol=1e-12)


def test_whole_batch_advantages_use_the_population_std():
    """catches: the whole-batch mistake computed with the sample std. Rewards [[1, 0], [0, 0]]: mean 1/4,
    population variance (9/16 + 3/16) / 4 = 3/16, so 1 -> (3/4) / sqrt(3/16) = sqrt(3) and 0 -> -1/sqrt(3)
    (the sample std, 1/2, would give 1.5)."""
    compute = named("group_advantages", "whole batch")
    got = compute(rewards=double([[1.0, 0.0], [0.0, 0.0]]))
    third = -1 / math.sqrt(3)
    assert torch.allclose(got, double([[math.sqrt(3), third], [third, third]]), rtol=1e-5)


def plain_update_loss(advantages, log_ratio, tau_pos, tau_neg):
    """SAPO's loss written out for one-token responses: the mean of -A (4 / tau) sigmoid(tau (r - 1))."""
    total = 0.0
    for a, z in zip(advantages, log_ratio, strict=True):
        tau = tau_pos if a > 0 else tau_neg
        total += -a * 4 / tau / (1 + math.exp(-tau * (math.exp(z) - 1)))
    return total / len(advantages)


def test_the_column_by_column_mistake_reorders_the_advantages():
    """catches: the column-flatten mistake without its transpose (then it is the right answer and names
    nothing). Rewards [[1, 0], [0, 0]] give group advantages [[a, -a], [0, 0]] with a = 0.5 / (0.5 + 1e-6);
    row by row that is (a, -a, 0, 0), column by column (a, 0, -a, 0). Each response has one token with its own
    ratio, so the order changes the loss."""
    compute = named("update_loss", "column by column")
    log_ratio = [0.5, -0.3, 0.2, 0.0]
    behavior = torch.zeros(4, 1, dtype=torch.float64)
    got = compute(logp=behavior + double(log_ratio)[:, None], behavior_logp=behavior,
                  rewards=double([[1.0, 0.0], [0.0, 0.0]]), mask=torch.ones(4, 1, dtype=torch.float64),
                  tau_pos=0.7, tau_neg=2.0)
    a = 0.5 / (0.5 + 1e-6)
    assert math.isclose(float(got), plain_update_loss([a, 0.0, -a, 0.0], log_ratio, 0.7, 2.0), rel_tol=1e-9)
    assert not math.isclose(float(got), plain_update_loss([a, -a, 0.0, 0.0], log_ratio, 0.7, 2.0), rel_tol=1e-3)


def test_the_ratio_side_mistake_takes_tau_neg_at_a_ratio_of_exactly_one():
    """catches: the ratio-side mistake choosing tau_pos at r = 1 (r >= 1 for r > 1). On-policy with A = -1,
    the per-token loss is -A (4 / tau) sigmoid(0) = 2 / tau: 2 / 2 = 1 at tau_neg = 2, 4 at tau_pos = 0.5."""
    compute = named("sapo_loss", "ratio's side")
    logp = torch.zeros(1, 1, dtype=torch.float64)
    got = compute(logp=logp, behavior_logp=logp.clone(), advantages=double([-1.0]),
                  mask=torch.ones(1, 1, dtype=torch.float64), tau_pos=0.5, tau_neg=2.0)
    assert math.isclose(float(got), 1.0, rel_tol=1e-12)


def test_a_factor_that_prints_as_1_is_not_called_a_factor():
    """catches: "every element is 1 times the right one" for a factor of 1 + 1e-7 that a tight tolerance
    still tells apart; the elements then simply differ (4.0000004 against 4 is the largest)."""
    expected = double([1.0, 2.0, 4.0])
    said = describe_difference(expected * (1 + 1e-7), expected, rtol=1e-9, atol=0.0)
    assert said == "3 of 3 elements differ; largest difference at [2]: got 4.0000004, expected 4"


def test_two_numbers_parting_in_their_13th_digit_are_printed_with_16():
    """catches: the digits tried stopping at 12, which prints 1 against 1 for 1 + 1e-13 against 1."""
    said = describe_difference(double(1.0 + 1e-13), double(1.0), rtol=0.0, atol=0.0)
    assert said == "largest difference at the value: got 1.0000000000001, expected 1"
    assert mistakes._distinct(1.0 + 1e-13, 1.0) == ("1.0000000000001", "1")


def test_the_gspo_mistakes_on_a_padded_response():
    """catches: the padding switch inverted (the padded mistake masked, the others padded). One response of
    T = 3 with log-ratios 0.3, 0.6, 0.9 and the last token padding: right exp((0.3 + 0.6) / 2) = exp(0.45);
    padding counted exp(1.8 / 3) = exp(0.6); the total exponentiated exp(0.9)."""
    behavior = torch.zeros(1, 3, dtype=torch.float64)
    kw = dict(logp=behavior + double([[0.3, 0.6, 0.9]]), behavior_logp=behavior, mask=double([[1.0, 1.0, 0.0]]))
    assert math.isclose(float(named("gspo_sequence_ratio", "padding tokens counted")(**kw)), math.exp(0.6),
                        rel_tol=1e-12)
    assert math.isclose(float(named("gspo_sequence_ratio", "total log-ratio")(**kw)), math.exp(0.9), rel_tol=1e-12)
