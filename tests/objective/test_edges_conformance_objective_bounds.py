"""The objective's documented boundaries, each tried on the bound and a step either side, with distinct settings.

Every expected value is worked out by hand in the test (the arithmetic is in the comments); none is read from the
function under test or its helpers.
"""

import math

import pytest
import torch

from sapo_lab.objective.advantages import group_advantages
from sapo_lab.objective.clip import check_clip_eps
from sapo_lab.objective.diagnostics import (
    approximate_gate_gap,
    token_sequence_gradient_comparison,
    zero_advantage_groups,
)
from sapo_lab.objective.gates import token_temperatures
from sapo_lab.objective.kernels import hard_clip_cut_side, log_directional_gate_from_log_ratio
from sapo_lab.objective.losses import kl_to_reference, policy_loss, signal_removed_split
from sapo_lab.objective.masks import aggregation_weights, mask_from_lengths

F64 = torch.float64


def _batch(log_ratios, advantages):
    """Right-padded (logp, behaviour, A, mask) with exact log ratios: logp = -1, behaviour = -1 - z."""
    width = max(len(z) for z in log_ratios)
    z = torch.zeros(len(log_ratios), width, dtype=F64)
    mask = torch.zeros(len(log_ratios), width, dtype=torch.bool)
    for i, row in enumerate(log_ratios):
        z[i, : len(row)] = torch.tensor(row, dtype=F64)
        mask[i, : len(row)] = True
    logp = torch.full_like(z, -1.0)
    return logp, logp - z, torch.tensor(advantages, dtype=F64), mask


def test_a_zero_advantage_takes_tau_neg():
    """Catches the sign rule written A >= 0 for tau_pos: the docstring gives A = 0 to tau_neg (1.5 vs 0.5 here)."""
    got = token_temperatures(torch.tensor([2.0, 0.0, -3.0], dtype=F64), 1.5, 0.5)
    assert got.tolist() == [1.5, 0.5, 0.5]


def test_mask_lengths_accept_the_padded_length_and_refuse_one_more():
    """Catches ``lengths >= num_tokens`` refused: a response filling every position (3 of 3) is valid."""
    assert mask_from_lengths([0, 3], 3).tolist() == [[False, False, False], [True, True, True]]
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        mask_from_lengths([4], 3)


def test_per_response_weights_leave_empty_responses_out_of_n():
    """Catches N counting the empty response: lengths 2, 0, 1 give N = 2, so 1/(2*2) = 0.25 and 1/(1*2) = 0.5
    (counting it, N = 3, would give 1/6 and 1/3)."""
    mask = torch.tensor([[1, 1], [0, 0], [1, 0]], dtype=torch.bool)
    assert aggregation_weights(mask, "per_response", dtype=F64).tolist() == [[0.25, 0.25], [0.0, 0.0], [0.5, 0.0]]


@pytest.mark.parametrize(("eps_low", "eps_high", "ok"), [
    (0.999, 0.3, True), (1.0, 0.3, False),     # eps_low < 1: at 1 the band's lower end is 0
    (0.2, 0.0, True), (0.2, -0.001, False),    # eps_high >= 0: 0 is a valid (one-sided) clip
    (0.0, 0.3, True), (-0.001, 0.3, False),
])
def test_clip_epsilon_bounds(eps_low, eps_high, ok):
    """Catches ``eps_low <= 1`` accepted and ``eps_high > 0`` required (the docstring: 0 <= eps_low < 1,
    eps_high >= 0)."""
    if ok:
        check_clip_eps(eps_low, eps_high)
    else:
        with pytest.raises(ValueError, match="clip epsilons"):
            check_clip_eps(eps_low, eps_high)


def test_the_loss_counts_a_ratio_on_the_clip_bound_as_clipped():
    """Catches the loss's clip counting r = 1 - eps_low as live for A < 0: with eps_low = 0 the bound is r = 1
    exactly (z = 0), the token is clipped (no gradient, clip_frac 1); a step inside (z = +0.25) is live.
    eps_high = 0.3 keeps the two epsilons apart."""
    logp, old, adv, mask = _batch([[0.0], [0.25]], [-1.0, -2.0])
    logp.requires_grad_(True)
    out = policy_loss(logp, old, adv, mask, loss_type="grpo", clip_eps_low=0.0, clip_eps_high=0.3)
    (grad,) = torch.autograd.grad(out.loss, logp)
    # response 0: clipped, gradient 0; response 1: live, d/dz of -A r / N = -(-2) e^0.25 / 2 = e^0.25 (descent sign)
    assert grad[0, 0].item() == 0.0
    assert grad[1, 0].item() == pytest.approx(math.exp(0.25), rel=1e-12)
    assert out.stats["clip_frac"] == 0.5


def test_clip_frac_leaves_zero_advantages_out():
    """Catches A = 0 tokens counted as clipped (their gate is 0 too): tokens A = 1 at r = 1 (live) and A = 0;
    the clip silences no signed token, so clip_frac = 0 (counting A = 0 gives 1/2)."""
    logp, old, adv, mask = _batch([[0.0], [0.0]], [1.0, 0.0])
    out = policy_loss(logp, old, adv, mask, loss_type="grpo", clip_eps_low=0.1, clip_eps_high=0.3)
    assert out.stats["clip_frac"] == 0.0


def test_group_advantages_eps_must_be_positive():
    """Catches eps = 0 accepted (a constant group would then divide 0 by 0 only by luck of the exact zero)."""
    with pytest.raises(ValueError, match="eps must be > 0"):
        group_advantages([[1.0, 0.0]], eps=0.0)
    # a step above: (1 - 0.5) / (0.5 + 1e-12) = 1 - 2e-12 to float64 rounding
    assert group_advantages([[1.0, 0.0]], eps=1e-12).tolist()[0][0] == pytest.approx(1.0, abs=1e-11)


def test_max_log_ratio_counts_only_beyond_the_bound():
    """Catches ``|z| >= max_log_ratio`` counted: z = 2 exactly (logp -1, behaviour -3) is within max_log_ratio = 2,
    beyond 1.999; policy "error" raises only for the second."""
    logp, old, adv, mask = _batch([[2.0, -0.5]], [1.0])
    at = policy_loss(logp, old, adv, mask, max_log_ratio=2.0, max_log_ratio_policy="error")
    assert at.stats["beyond_max_log_ratio"] == 0
    past = policy_loss(logp, old, adv, mask, max_log_ratio=1.999)
    assert past.stats["beyond_max_log_ratio"] == 1
    with pytest.raises(ValueError, match="max_log_ratio=1.999"):
        policy_loss(logp, old, adv, mask, max_log_ratio=1.999, max_log_ratio_policy="error")


def test_max_log_ratio_must_be_positive():
    """Catches max_log_ratio = 0 accepted (every token but r = 1 would count as beyond it)."""
    logp, old, adv, mask = _batch([[0.5]], [1.0])
    with pytest.raises(ValueError, match="max_log_ratio must be > 0"):
        policy_loss(logp, old, adv, mask, max_log_ratio=0.0)
    assert policy_loss(logp, old, adv, mask, max_log_ratio=1e-3).stats["beyond_max_log_ratio"] == 1


def test_kl_token_pool_divides_by_valid_tokens_not_the_padded_size():
    """Catches token_pool's mean over the padded (batch, tokens) array: three valid tokens of six; only token
    (0, 0) has d = ln 2, k3 = e^d - d - 1 = 1 - ln 2, so the pool is (1 - ln 2) / 3 (padded: / 6); per response
    it is ((1 - ln 2) / 2 + 0) / 2."""
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    logp = torch.zeros(2, 3, dtype=F64)
    ref = torch.zeros(2, 3, dtype=F64)
    ref[0, 0] = math.log(2.0)
    ref[0, 2] = ref[1, 2] = 5.0  # padding: must not count
    k3 = 1.0 - math.log(2.0)
    assert kl_to_reference(logp, ref, mask, "token_pool").item() == pytest.approx(k3 / 3, rel=1e-12)
    assert kl_to_reference(logp, ref, mask, "per_response").item() == pytest.approx(k3 / 4, rel=1e-12)


def test_a_token_at_r_one_is_on_neither_side():
    """Catches r = 1 counted 'below': tokens z = 0 and z = -0.5, A = 1, equal weights; the below cell's share of
    the signal alpha |A| r is e^-0.5 / (1 + e^-0.5) (the r = 1 token's mass is in neither cell), not 1."""
    z = torch.tensor([0.0, -0.5], dtype=F64)
    adv = torch.ones(2, dtype=F64)
    weight = torch.full((2,), 0.5, dtype=F64)
    out = signal_removed_split(z, adv, weight, torch.zeros(2, dtype=F64))
    expected = math.exp(-0.5) / (1.0 + math.exp(-0.5))
    assert out["signal_share_pos_below"] == pytest.approx(expected, rel=1e-12)
    assert out["signal_share_pos_above"] == 0.0


def test_zero_advantage_group_fraction_is_per_prompt():
    """Catches the fraction divided by G instead of the prompt count: 3 prompts x G = 2 with two flat groups
    give 2/3 of the groups and 4 responses (dividing by G would say 2/2)."""
    out = zero_advantage_groups(torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]))
    assert out == {"zero_advantage_groups": 2, "zero_advantage_group_frac": pytest.approx(2 / 3),
                   "zero_advantage_responses": 4}


def test_gate_gap_bound_uses_tau_neg_at_zero_advantage_and_the_population_variance():
    """Catches A = 0 given tau_pos and the variance divided by n - 1: z = +0.5, -0.5 has mean 0 and population
    variance 0.25, so the bound tau^2 V / 4 is 2^2 * 0.25 / 4 = 0.25 with tau_neg = 2 (tau_pos = 1 gives 0.0625;
    n - 1 gives 0.5)."""
    z = torch.tensor([[0.5, -0.5]], dtype=F64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    _gap, bound = approximate_gate_gap(z, mask, torch.zeros(1, dtype=F64), tau_pos=1.0, tau_neg=2.0)
    assert bound.tolist() == [0.25]


def test_strata_put_the_edge_length_and_the_threshold_ratio_in_the_lower_bin():
    """Catches a length bin ``len_le2`` without length 2 and the ratio tail taking |log r| equal to its threshold:
    lengths 1, 2, 3 with edge 2 give 2 responses in len_le2 and 1 in len_gt2; the largest |log r| of each response
    is 0.25 (exact: logp -1, behaviour -1.25), 0.25 and 0.5, so with tail_log_ratio 0.25 only the third is a tail."""
    logp, old, adv, mask = _batch([[0.25], [0.25, -0.125], [0.5, 0.125, -0.25]], [1.0, -1.0, 2.0])
    scores = torch.arange(3 * 3 * 2, dtype=F64).reshape(3, 3, 2) / 7.0
    out = token_sequence_gradient_comparison(logp, old, adv, mask, scores=scores, length_edges=[2],
                                             tail_log_ratio=0.25, tau_pos=1.5, tau_neg=0.5)
    assert (out["tokseq_len_le2_responses"], out["tokseq_len_gt2_responses"]) == (2, 1)
    assert (out["tokseq_ratio_bulk_responses"], out["tokseq_ratio_tail_responses"]) == (2, 1)


def test_cut_side_and_directional_gate_at_the_edges():
    """Catches r = 1 counted as the cut side for A < 0 and A = 0 tokens attenuated by the directional gate: the cut
    side is r < 1 strictly for A < 0, and A = 0 has no cut side (log gate 0 at z = -1, where SAPO's is below 0)."""
    ratio = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    assert hard_clip_cut_side(ratio, -1.0).tolist() == [True, False, False]
    assert hard_clip_cut_side(ratio, 1.0).tolist() == [False, False, True]
    z = torch.tensor([-1.0, -1.0], dtype=F64)
    got = log_directional_gate_from_log_ratio(z, torch.tensor([0.0, -1.0], dtype=F64), 1.0)
    # A < 0 at r = e^-1: log sech^2((e^-1 - 1) / 2) < 0 (cut side); A = 0: 0
    assert got[0].item() == 0.0
    assert got[1].item() == pytest.approx(2 * math.log(1 / math.cosh((math.exp(-1.0) - 1) / 2)), rel=1e-12)
