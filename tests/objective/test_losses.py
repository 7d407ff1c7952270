"""policy_loss against independent computations: closed forms, finite differences, TRL's convention."""

import math

import pytest
import torch
from _batches import random_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from sapo_lab import (
    aggregation_weights,
    gate_weight,
    gradient_audit,
    group_advantages,
    mask_from_lengths,
    policy_loss,
    update_coefficient,
)
from sapo_lab.objective.planted_mistakes import WRONG_IMPLEMENTATIONS

# These tests compare against closed forms at float64 precision.
pytestmark = pytest.mark.usefixtures("float64_by_default")


def grad_of(logp, *args, **kw):
    out = policy_loss(logp, *args, **kw)
    (g,) = torch.autograd.grad(out.loss, logp)
    return out, g


def weights_by_hand(mask, aggregation="per_response"):
    """alpha_{i,t} from the definitions, not from aggregation_weights (which the loss itself uses): per_response
    m / (L_i N) over the N non-empty responses, token_pool m / sum(m)."""
    m = mask.to(torch.float64)
    if aggregation == "token_pool":
        return m / m.sum()
    lengths = m.sum(-1, keepdim=True)
    return torch.where(lengths > 0, m / lengths.clamp(min=1) / int((lengths > 0).sum()), torch.zeros_like(m))


def sapo_token_loss_direct(logp, behavior, adv, tau_pos=1.0, tau_neg=1.05):
    """Independent formula: -A (4/tau) [sigmoid(tau (r - 1)) - 1/2] with r = p / b."""
    r = torch.exp(logp) / torch.exp(behavior)
    a = adv[:, None].expand_as(r)
    tau = torch.where(a > 0, torch.tensor(tau_pos), torch.tensor(tau_neg))
    return -a * (4 / tau) * (torch.sigmoid(tau * (r - 1)) - 0.5)


def trl_sapo_aggregation(token_loss, mask):
    """The convention TRL documents for loss_type='sapo': per-response masked mean, then the mean."""
    m = mask.to(token_loss.dtype)
    return ((token_loss * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()


# --- the on-policy point -------------------------------------------------------------------------

def test_gradient_at_ratio_one_is_minus_a_over_l_n_with_empty_response_excluded():
    lengths = torch.tensor([3, 0, 7, 1])
    logp, _, adv, mask = random_batch(4, 7, lengths=lengths)
    out, g = grad_of(logp, logp.detach(), adv, mask)
    n_nonempty = 3
    expected = -(adv[:, None] / (lengths.clamp(min=1)[:, None] * n_nonempty)) * mask
    assert torch.allclose(g, expected, atol=1e-15)
    assert out.stats["empty_responses"] == 1
    assert float(out.loss.detach()) == 0.0  # centred surrogate: zero loss, non-zero gradient


@pytest.mark.parametrize("loss_type", ["sapo", "grpo", "gspo"])
def test_zero_advantage_gives_zero_gradient(loss_type):
    logp, behavior, _, mask = random_batch()
    _, g = grad_of(logp, behavior, torch.zeros(5), mask, loss_type=loss_type)
    assert torch.equal(g, torch.zeros_like(g))


def test_equal_reward_groups_give_zero_gradient_without_nan():
    adv = group_advantages(torch.tensor([[1.0, 1.0, 1.0], [0.1, 0.1, 0.1]])).flatten()
    assert torch.equal(adv, torch.zeros(6))
    logp, behavior, _, mask = random_batch(6, 4)
    out, g = grad_of(logp, behavior, adv, mask)
    assert torch.equal(g, torch.zeros_like(g)) and out.stats["tokens_zero"] == int(mask.sum())


# --- closed form and finite differences ---------------------------------------------------------

@pytest.mark.parametrize("aggregation", ["per_response", "token_pool"])
def test_token_sapo_gradient_equals_closed_form(aggregation):
    logp, behavior, adv, mask = random_batch(6, 9, spread=0.8, seed=3)
    _, g = grad_of(logp, behavior, adv, mask, aggregation=aggregation)
    r = torch.exp(logp.detach() - behavior)
    tau = torch.where(adv[:, None] > 0, 1.0, 1.05).expand_as(r)
    alpha = weights_by_hand(mask, aggregation)
    expected = -alpha * adv[:, None] * r * gate_weight(r, tau)
    assert torch.allclose(g, expected, rtol=1e-12, atol=1e-16)


def test_sequence_sapo_gradient_equals_closed_form():
    logp, behavior, adv, mask = random_batch(6, 9, spread=0.5, seed=4)
    _, g = grad_of(logp, behavior, adv, mask, importance_sampling_level="sequence")
    lengths = mask.sum(-1)
    s = torch.exp(((logp.detach() - behavior) * mask).sum(-1) / lengths)
    tau = torch.where(adv > 0, 1.0, 1.05)
    per_response = -adv * update_coefficient(s, tau) / (lengths * len(lengths))
    assert torch.allclose(g, per_response[:, None] * mask, rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("loss_type,level", [("sapo", "token"), ("sapo", "sequence"), ("grpo", "token"),
                                             ("grpo", "sequence"), ("gspo", "sequence")])
@pytest.mark.parametrize("aggregation", ["per_response", "token_pool"])
def test_gradient_matches_finite_differences(loss_type, level, aggregation):
    logp, behavior, adv, mask = random_batch(4, 6, spread=0.4, seed=11)
    kw = dict(loss_type=loss_type, importance_sampling_level=level, aggregation=aggregation, compute_stats=False)
    _, g = grad_of(logp, behavior, adv, mask, **kw)
    h = 1e-6
    fd = torch.zeros_like(g)
    base = logp.detach()
    for idx in mask.nonzero():
        i, t = int(idx[0]), int(idx[1])
        up, down = base.clone(), base.clone()
        up[i, t] += h
        down[i, t] -= h
        fd[i, t] = (policy_loss(up, behavior, adv, mask, **kw).loss - policy_loss(down, behavior, adv, mask, **kw).loss) / (2 * h)
    r = torch.exp(base - behavior)
    near_kink = ((r - 0.8).abs() < 1e-4) | ((r - 1.2).abs() < 1e-4)
    assert not bool((near_kink & mask).any()), "test batch should avoid the clip's kinks"
    assert torch.allclose(g, fd, atol=1e-8)


def test_grpo_matches_direct_min_clip_formula_value_and_gradient():
    logp, behavior, adv, mask = random_batch(6, 8, spread=0.5, seed=5)
    out, g = grad_of(logp, behavior, adv, mask, loss_type="grpo", clip_eps_low=0.2, clip_eps_high=0.28)
    x = logp.detach().clone().requires_grad_(True)
    r = torch.exp(x - behavior)
    a = adv[:, None]
    token = -torch.minimum(r * a, torch.clamp(r, 0.8, 1.28) * a)
    ref = trl_sapo_aggregation(token, mask)
    (g_ref,) = torch.autograd.grad(ref, x)
    assert torch.allclose(out.loss, ref, rtol=1e-12) and torch.allclose(g, g_ref, atol=1e-15)


# --- aggregation conventions --------------------------------------------------------------------

def test_per_response_equals_trl_convention_on_random_batches():
    for seed in range(20):
        logp, behavior, adv, mask = random_batch(8, 12, spread=0.6, seed=seed)
        out, g = grad_of(logp, behavior, adv, mask, tau_pos=1.0, tau_neg=1.05)
        x = logp.detach().clone().requires_grad_(True)
        ref = trl_sapo_aggregation(sapo_token_loss_direct(x, behavior, adv), mask)
        (g_ref,) = torch.autograd.grad(ref, x)
        assert torch.allclose(out.loss, ref, rtol=1e-12, atol=1e-15)
        assert torch.allclose(g, g_ref, rtol=1e-10, atol=1e-15)


def test_ten_versus_hundred_tokens_weights():
    mask = mask_from_lengths([10, 100], 100)
    per_response = aggregation_weights(mask, "per_response").sum(-1)
    pooled = aggregation_weights(mask, "token_pool").sum(-1)
    assert torch.allclose(per_response, torch.tensor([0.5, 0.5]))
    assert torch.allclose(pooled, torch.tensor([1 / 11, 10 / 11]))


def test_padding_values_are_never_read():
    logp, behavior, adv, mask = random_batch(4, 6, seed=2, lengths=torch.tensor([2, 6, 3, 1]))
    noisy = logp.detach().clone()
    noisy[~mask] = float("nan")
    noisy.requires_grad_(True)
    a, ga = grad_of(logp, behavior, adv, mask)
    b, gb = grad_of(noisy, behavior.masked_fill(~mask, float("inf")), adv, mask)
    assert torch.equal(a.loss, b.loss) and torch.equal(ga, gb)


# --- what carries no gradient -------------------------------------------------------------------

def test_behavior_advantages_and_temperatures_carry_no_gradient():
    logp, behavior, adv, mask = random_batch()
    behavior = behavior.clone().requires_grad_(True)
    adv = adv.clone().requires_grad_(True)
    out = policy_loss(logp, behavior, adv, mask)
    out.loss.backward()
    assert behavior.grad is None and adv.grad is None and logp.grad is not None


def test_double_backward_matches_closed_form_second_derivative():
    # d^2/dz^2 of -A f(e^z) = -A (r w + r^2 w'), with w' = -tau w tanh(u/2), u = tau (r - 1).
    z = torch.tensor([[-0.7, 0.1, 0.9]], requires_grad=True)
    adv = torch.tensor([1.3])
    out = policy_loss(z, torch.zeros_like(z), adv, torch.ones_like(z))
    (g,) = torch.autograd.grad(out.loss, z, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), z)
    r = torch.exp(z.detach())
    u = r - 1
    w = gate_weight(r, 1.0)
    expected = -1.3 * (r * w + r**2 * (-w * torch.tanh(u / 2))) / 3
    assert torch.allclose(h, expected, rtol=1e-12)


# --- extreme staleness --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_log_ratios_stay_finite_and_exact(dtype):
    z = torch.tensor([[3000.0, -3000.0, 0.5, 0.0]], dtype=dtype, requires_grad=True)
    adv = torch.tensor([-1.0], dtype=dtype)
    out = policy_loss(z, torch.zeros_like(z), adv, torch.ones_like(z))
    (g,) = torch.autograd.grad(out.loss, z)
    assert torch.isfinite(out.loss) and torch.isfinite(g).all()
    tau = 1.05
    exact = -adv * update_coefficient(torch.exp(torch.tensor([0.5, 0.0], dtype=torch.float64)), tau) / 4
    assert g[0, 0] == 0 and g[0, 1] == 0  # e^-3000 * w underflows to exactly 0; e^3000 w(e^3000) is 0 too
    assert torch.allclose(g[0, 2:].double(), exact, rtol=1e-6)
    expected_loss = (2 / tau) * (math.tanh(tau * math.expm1(0.5) / 2) + 1 + math.tanh(-tau / 2)) / 4
    assert float(out.loss.detach()) == pytest.approx(expected_loss, rel=1e-6)
    assert out.stats["beyond_max_log_ratio"] == 2 and out.stats["max_abs_log_ratio"] == 3000.0


@pytest.mark.parametrize("loss_type", ["grpo", "gspo"])
def test_clip_losses_with_saturated_extreme_ratios_have_finite_gradient(loss_type):
    z = torch.tensor([[3000.0, 0.1], [-3000.0, 0.1]], requires_grad=True)
    out = policy_loss(z, torch.zeros_like(z), torch.tensor([1.0, -1.0]), torch.ones_like(z), loss_type=loss_type)
    (g,) = torch.autograd.grad(out.loss, z)
    assert torch.isfinite(out.loss) and torch.isfinite(g).all()


def test_max_log_ratio_policies():
    z = torch.tensor([[50.0, 0.1, 0.2], [0.0, 0.3, 0.1]], requires_grad=True)
    args = (z, torch.zeros_like(z), torch.tensor([1.0, -1.0]), torch.ones_like(z))
    with pytest.raises(ValueError, match="max_log_ratio"):
        policy_loss(*args, max_log_ratio_policy="error")
    skipped = policy_loss(*args, max_log_ratio_policy="skip")
    assert skipped.stats["skipped_tokens"] == 1 and skipped.stats["used_tokens"] == 5
    (g,) = torch.autograd.grad(skipped.loss, z)
    assert g[0, 0] == 0 and g[0, 1] != 0
    recorded = policy_loss(*args, max_log_ratio_policy="record")
    assert recorded.stats["beyond_max_log_ratio"] == 1 and recorded.stats["skipped_tokens"] == 0


# --- stats ---------------------------------------------------------------------------------------

def test_signal_removed_fraction_matches_direct_computation():
    logp, behavior, adv, mask = random_batch(6, 8, spread=0.7, seed=9)
    out = policy_loss(logp, behavior, adv, mask)
    r = torch.exp(logp.detach() - behavior)
    tau = torch.where(adv[:, None] > 0, 1.0, 1.05).expand_as(r)
    alpha = weights_by_hand(mask, "per_response")
    unclipped = (alpha * adv[:, None].abs() * r)[mask]
    kept = (alpha * adv[:, None].abs() * update_coefficient(r, tau))[mask]
    assert out.stats["signal_removed_frac"] == pytest.approx(float(1 - kept.sum() / unclipped.sum()), rel=1e-10)
    assert out.stats["tokens_pos"] + out.stats["tokens_neg"] + out.stats["tokens_zero"] == int(mask.sum())
    assert out.stats["ratio_q50"] == pytest.approx(float(torch.quantile(r[mask], 0.5)))
    grpo = policy_loss(logp, behavior, adv, mask, loss_type="grpo")
    assert 0 < grpo.stats["clip_frac"] < 1 and 0 < grpo.stats["signal_removed_frac"] < 1


# --- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mutate,match", [
    (lambda b: (b[0][:, :-1], *b[1:]), "same"),
    (lambda b: (b[0], b[1], b[2][:-1], b[3]), "advantages"),
    (lambda b: (b[0], b[1], b[2], b[3].double() * 0.5 + 0.25), "0 and 1"),
    (lambda b: (b[0].detach().masked_fill(b[3], float("nan")), *b[1:]), "NaN"),
    (lambda b: (b[0][:0], b[1][:0], b[2][:0], b[3][:0]), "empty"),
    (lambda b: (b[0], b[1], b[2], torch.zeros_like(b[3])), "no valid token"),
])
def test_bad_inputs_raise_clear_errors(mutate, match):
    with pytest.raises(ValueError, match=match):
        policy_loss(*mutate(random_batch()))


@pytest.mark.parametrize("kw,match", [
    (dict(tau_pos=0.0), "tau"), (dict(tau_neg=-1.0), "tau"), (dict(loss_type="ppo"), "loss_type"),
    (dict(aggregation="sum"), "aggregation"), (dict(importance_sampling_level="seq"), "importance"),
    (dict(loss_type="gspo", importance_sampling_level="token"), "gspo"),
    (dict(max_log_ratio_policy="clamp"), "max_log_ratio_policy"),
])
def test_bad_options_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        policy_loss(*random_batch(), **kw)


# --- property-based ------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 6), tokens=st.integers(1, 9), scale=st.sampled_from([1e-3, 0.3, 3.0, 30.0, 300.0]),
       seed=st.integers(0, 10_000), level=st.sampled_from(["token", "sequence"]),
       aggregation=st.sampled_from(["per_response", "token_pool"]), use_float32=st.booleans())
def test_property_finite_and_closed_form(batch, tokens, scale, seed, level, aggregation, use_float32):
    g = torch.Generator().manual_seed(seed)
    dtype = torch.float32 if use_float32 else torch.float64
    logp = (-torch.rand(batch, tokens, generator=g) * 5).to(dtype)
    behavior = logp + (scale * torch.randn(batch, tokens, generator=g)).to(dtype)
    adv = (torch.randn(batch, generator=g) * torch.randint(0, 2, (batch,), generator=g)).to(dtype)
    lengths = torch.randint(0, tokens + 1, (batch,), generator=g)
    lengths[0] = max(1, int(lengths[0]))
    mask = mask_from_lengths(lengths, tokens)
    x = logp.clone().requires_grad_(True)
    out = policy_loss(x, behavior, adv, mask, importance_sampling_level=level, aggregation=aggregation)
    (grad,) = torch.autograd.grad(out.loss, x)
    assert torch.isfinite(out.loss) and torch.isfinite(grad).all()
    assert bool((grad[~mask] == 0).all())
    if level == "token":
        z = (logp - behavior).double()
        tau = torch.where(adv[:, None] > 0, 1.0, 1.05).double().expand_as(z)
        coef = torch.exp(z + torch.log(gate_weight(torch.exp(z), tau).clamp(min=1e-300)))
        coef = torch.where(gate_weight(torch.exp(z), tau) == 0, torch.zeros_like(coef), coef)
        expected = -weights_by_hand(mask, aggregation) * adv[:, None].double() * coef
        tol = 1e-5 if use_float32 else 1e-10
        assert torch.allclose(grad.double(), expected, rtol=tol, atol=tol * 1e-3)


# --- audit and teaching mistakes -----------------------------------------------------------------

def test_gradient_audit_agrees_three_ways():
    table = gradient_audit()
    assert len(table.rows) == 2 * 2 * 7 and table.max_error < 1e-7
    at_one = [row for row in table.rows if row["ratio"] == 1.0]
    assert all(row["autograd"] == pytest.approx(-row["A"], abs=1e-15) for row in at_one)
    assert "| tau |" in table.to_markdown()


@pytest.mark.parametrize("name", list(WRONG_IMPLEMENTATIONS))
def test_each_wrong_implementation_differs_from_policy_loss(name):
    wrong = WRONG_IMPLEMENTATIONS[name]
    logp, behavior, adv, mask = random_batch(5, 7, spread=0.6, seed=21, lengths=torch.tensor([2, 7, 4, 3, 5]))
    _, g_right = grad_of(logp, behavior, adv, mask, tau_pos=1.0, tau_neg=1.0)
    x = logp.detach().clone().requires_grad_(True)
    wrong_loss = wrong(x, behavior, adv, mask, 1.0)
    if name == "fully detached weight":
        (g_wrong,) = torch.autograd.grad(wrong_loss, x, create_graph=True)
        assert torch.allclose(g_wrong, g_right, atol=1e-14)   # same first derivative ...
        # Its gradient is a constant (everything is detached), so its Hessian is exactly zero.
        assert not g_wrong.requires_grad
        h_wrong = torch.zeros_like(g_wrong)
        y = logp.detach().clone().requires_grad_(True)
        (g2,) = torch.autograd.grad(policy_loss(y, behavior, adv, mask, tau_pos=1.0, tau_neg=1.0).loss, y,
                                    create_graph=True)
        (h_right,) = torch.autograd.grad(g2.sum(), y)
        assert (h_wrong - h_right).abs().max() > 1e-3          # ... different second derivative
    else:
        (g_wrong,) = torch.autograd.grad(wrong_loss, x)
        assert (g_wrong - g_right).abs().max() > 1e-3


def test_package_exports_resolve_and_loss_library_does_not_load_transformers():
    import subprocess
    import sys

    code = ("import sys, sapo_lab; assert 'transformers' not in sys.modules; "
            "missing = [n for n in sapo_lab.__all__ if getattr(sapo_lab, n, None) is None]; assert not missing, missing")
    subprocess.run([sys.executable, "-c", code], check=True)
