"""Group advantages against a direct formula, edge cases and properties."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sapo_lab import group_advantages


def test_review_example():
    adv = group_advantages(torch.tensor([[0.0, 1.0, 1.0, 0.0]]), eps=1e-12)
    assert torch.allclose(adv, torch.tensor([[-1.0, 1.0, 1.0, -1.0]]), atol=1e-10)


def test_population_std_and_eps_in_denominator():
    rewards = torch.tensor([[0.0, 1.0, 3.0]], dtype=torch.float64)
    mean = rewards.mean()
    std = ((rewards - mean) ** 2).mean().sqrt()
    assert torch.allclose(group_advantages(rewards, eps=0.5), (rewards - mean) / (std + 0.5))


def test_equal_rewards_are_exactly_zero():
    rewards = torch.tensor([[0.1, 0.1, 0.1], [5.0, 5.0, 5.0], [0.0, 1.0, 0.0]])
    adv = group_advantages(rewards)
    assert torch.equal(adv[:2], torch.zeros(2, 3)) and torch.isfinite(adv).all()


def test_one_rare_success_closed_form():
    for g in range(2, 40):
        rewards = torch.zeros(1, g, dtype=torch.float64)
        rewards[0, 0] = 1.0
        adv = group_advantages(rewards, eps=1e-12)[0]
        assert float(adv[0]) == pytest.approx((g - 1) ** 0.5, rel=1e-9)
        assert float(adv[1]) == pytest.approx(-((g - 1) ** -0.5), rel=1e-9)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rewards_raise_with_location(bad):
    rewards = torch.zeros(3, 4)
    rewards[2, 1] = bad
    with pytest.raises(ValueError, match=r"\(2, 1\)"):
        group_advantages(rewards)


@pytest.mark.parametrize("rewards", [torch.zeros(4), torch.zeros(0, 3), torch.zeros(2, 0)])
def test_bad_shapes_raise(rewards):
    with pytest.raises(ValueError, match="rewards"):
        group_advantages(rewards)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.floats(-100, 100), min_size=2, max_size=8).filter(lambda r: len(set(r)) > 1),
                min_size=1, max_size=4).filter(lambda groups: len({len(g) for g in groups}) == 1))
def test_property_zero_mean_unit_std(groups):
    rewards = torch.tensor(groups, dtype=torch.float64)
    adv = group_advantages(rewards, eps=1e-12)
    assert torch.allclose(adv.mean(dim=1), torch.zeros(len(groups), dtype=torch.float64), atol=1e-6)
    spread = rewards.std(dim=1, unbiased=False)
    ok = spread > 1e-6
    assert torch.allclose(adv.std(dim=1, unbiased=False)[ok], torch.ones(int(ok.sum()), dtype=torch.float64), atol=1e-5)
