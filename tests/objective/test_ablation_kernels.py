"""The §14.2 ablation kernels against independent computations: sympy, float64 loops, finite differences."""

import math

import pytest
import sympy as sp
import torch
from _batches import random_batch as shared_random_batch
from _micro import QUIET, parity_reward

from sapo_lab import policy_loss
from sapo_lab.objective.kernels import (
    directional_gate_weight,
    directional_surrogate,
    gaussian_gate_weight,
    gaussian_surrogate,
    gaussian_width,
    sapo_half_width,
)
from sapo_lab.objective.losses import LOSS_TYPES, SIGNAL_CELLS

KERNELS = ("sapo", "grpo", "sapo_directional", "gauss")


pytestmark = pytest.mark.usefixtures("float64_by_default")


def random_batch(batch=6, tokens=7, spread=0.6, seed=0, lengths=None):
    """The shared batch with one zero-advantage response in every batch."""
    return shared_random_batch(batch, tokens, spread, seed, lengths, zero_first_advantage=True)


# --- an independent, scalar, float64 reference written from the formulas ---------------------------

def sech2(x):
    return 1.0 / math.cosh(x) ** 2


def reference_gate(kind, r, a, tau, eps_low=0.2, eps_high=0.2):
    """w(r): the share of the unclipped update |A| r the kernel keeps (review §14.2 variants)."""
    if kind == "sapo":
        return sech2(tau * (r - 1) / 2)
    if kind == "sapo_directional":
        cut = (a > 0 and r > 1) or (a < 0 and r < 1)
        return sech2(tau * (r - 1) / 2) if cut else 1.0
    if kind == "gauss":
        half = 2 * math.log(1 + math.sqrt(2)) / tau      # where sech^2(tau d / 2) = 1/2
        sigma = half / math.sqrt(2 * math.log(2))         # where exp(-d^2 / 2 sigma^2) = 1/2
        return math.exp(-((r - 1) ** 2) / (2 * sigma**2))
    if kind == "grpo":
        live = (a > 0 and r < 1 + eps_high) or (a < 0 and r > 1 - eps_low)
        return 1.0 if live else 0.0
    raise AssertionError(kind)


def reference_surrogate(kind, r, a, tau):
    """Centred surrogate s(r) with s(1) = 0 and s' = gate, written per kernel."""
    if kind == "sapo":
        return (4 / tau) * (1 / (1 + math.exp(-tau * (r - 1))) - 0.5)
    if kind == "sapo_directional":
        cut = (a > 0 and r > 1) or (a < 0 and r < 1)
        return (4 / tau) * (1 / (1 + math.exp(-tau * (r - 1))) - 0.5) if cut else r - 1
    if kind == "gauss":
        sigma = 2 * math.log(1 + math.sqrt(2)) / tau / math.sqrt(2 * math.log(2))
        return sigma * math.sqrt(math.pi / 2) * math.erf((r - 1) / (sigma * math.sqrt(2)))
    raise AssertionError(kind)


def reference_loss_and_grad(kind, logp, behavior, adv, mask, level, aggregation, tau_pos=1.0, tau_neg=1.05):
    """Loss and d loss / d logp by explicit loops over responses and tokens."""
    logp, behavior = logp.detach().tolist(), behavior.tolist()
    adv, mask = adv.tolist(), mask.tolist()
    lengths = [sum(row) for row in mask]
    n_nonempty = sum(1 for n in lengths if n > 0)
    total_tokens = sum(lengths)
    loss, grad = 0.0, [[0.0] * len(row) for row in mask]
    for i, row in enumerate(mask):
        if lengths[i] == 0:
            continue
        a = adv[i]
        tau = tau_pos if a > 0 else tau_neg
        zs = [logp[i][t] - behavior[i][t] for t in range(len(row)) if row[t]]
        alpha = 1 / (lengths[i] * n_nonempty) if aggregation == "per_response" else 1 / total_tokens
        if level == "sequence":
            mu = sum(zs) / len(zs)
            zs = [mu] * len(zs)
        for k, t in enumerate(t for t in range(len(row)) if row[t]):
            r = math.exp(zs[k])
            loss += -alpha * a * reference_surrogate(kind, r, a, tau)
            coef = -alpha * a * r * reference_gate(kind, r, a, tau)  # d/dz of -alpha A s(e^z)
            if level == "sequence":  # d mu / d logp_t = 1 / L_i for every token of response i
                for t2 in (t2 for t2 in range(len(row)) if row[t2]):
                    grad[i][t2] += coef / lengths[i]
            else:
                grad[i][t] += coef
    return loss, torch.tensor(grad)


# --- the Gaussian kernel's match to SAPO, symbolically ---------------------------------------------

def test_gaussian_kernel_matches_sapo_slope_and_half_width_at_one_symbolically():
    r, tau = sp.symbols("r tau", positive=True)
    sapo_w = sp.sech(tau * (r - 1) / 2) ** 2
    sapo_f = (4 / tau) * (1 / (1 + sp.exp(-tau * (r - 1))))
    assert sp.simplify(sp.diff(sapo_f, r).rewrite(sp.exp) - sapo_w.rewrite(sp.exp)) == 0
    sigma = 2 * sp.asinh(1) / (tau * sp.sqrt(2 * sp.log(2)))
    gauss_w = sp.exp(-((r - 1) ** 2) / (2 * sigma**2))
    gauss_f = sigma * sp.sqrt(sp.pi / 2) * sp.erf((r - 1) / (sigma * sp.sqrt(2)))
    assert sp.simplify(sp.diff(gauss_f, r) - gauss_w) == 0            # the surrogate's derivative is the gate
    # Same value and slope of the surrogate's derivative at r = 1 (first-order update unclipped) ...
    for w in (sapo_w, gauss_w):
        assert sp.simplify(w.subs(r, 1)) == 1 and sp.simplify(sp.diff(w, r).subs(r, 1)) == 0
    assert gauss_f.subs(r, 1) == 0
    # ... and the same half-width: both gates are 1/2 at r = 1 + 2 asinh(1) / tau.
    half = 2 * sp.asinh(1) / tau
    assert sp.simplify(sapo_w.subs(r, 1 + half).rewrite(sp.exp) - sp.Rational(1, 2)) == 0
    assert sp.simplify(gauss_w.subs(r, 1 + half) - sp.Rational(1, 2)) == 0
    # A different kernel: its curvature at r = 1 is -tau^2 (2 ln 2) / (4 asinh(1)^2), not SAPO's -tau^2 / 2.
    curv_sapo = sp.simplify(sp.diff(sapo_w, r, 2).subs(r, 1))
    curv_gauss = sp.simplify(sp.diff(gauss_w, r, 2).subs(r, 1))
    assert sp.simplify(curv_sapo + tau**2 / 2) == 0
    assert sp.simplify(curv_gauss + tau**2 * 2 * sp.log(2) / (4 * sp.asinh(1) ** 2)) == 0
    assert float((curv_gauss / curv_sapo).subs(tau, 1)) == pytest.approx(0.892, abs=1e-3)
    # Numeric implementation agrees with the symbolic constants.
    for t in (0.5, 1.0, 1.05, 3.0):
        assert sapo_half_width(t) == pytest.approx(float(half.subs(tau, t)), rel=1e-15)
        assert gaussian_width(t) == pytest.approx(float(sigma.subs(tau, t)), rel=1e-15)


@pytest.mark.parametrize("tau", [0.5, 1.0, 1.05, 4.0])
def test_gate_and_surrogate_functions_match_the_scalar_reference(tau):
    rs = [0.01, 0.3, 0.8, 0.999, 1.0, 1.001, 1.3, 2.0, 5.0]
    for a in (1.0, -1.0):
        r = torch.tensor(rs)
        assert torch.allclose(gaussian_gate_weight(r, tau), torch.tensor([reference_gate("gauss", x, a, tau) for x in rs]),
                              rtol=1e-13)
        assert torch.allclose(gaussian_surrogate(r, tau), torch.tensor([reference_surrogate("gauss", x, a, tau) for x in rs]),
                              rtol=1e-12, atol=1e-15)
        assert torch.allclose(directional_gate_weight(r, a, tau),
                              torch.tensor([reference_gate("sapo_directional", x, a, tau) for x in rs]), rtol=1e-13)
        assert torch.allclose(directional_surrogate(r, a, tau),
                              torch.tensor([reference_surrogate("sapo_directional", x, a, tau) for x in rs]),
                              rtol=1e-12, atol=1e-15)


# --- policy_loss: values and gradients ------------------------------------------------------------

@pytest.mark.parametrize("kind", ["sapo_directional", "gauss"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("aggregation", ["per_response", "token_pool"])
def test_new_kernels_value_and_gradient_match_per_token_loop(kind, level, aggregation):
    for seed in range(3):
        logp, behavior, adv, mask = random_batch(seed=seed)
        out = policy_loss(logp, behavior, adv, mask, loss_type=kind, importance_sampling_level=level,
                          aggregation=aggregation, tau_pos=0.9, tau_neg=1.7)
        (g,) = torch.autograd.grad(out.loss, logp)
        ref_loss, ref_grad = reference_loss_and_grad(kind, logp, behavior, adv, mask, level, aggregation, 0.9, 1.7)
        assert float(out.loss.detach()) == pytest.approx(ref_loss, rel=1e-11, abs=1e-14)
        assert torch.allclose(g, ref_grad, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("kind", ["sapo_directional", "gauss"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_new_kernels_gradient_matches_finite_differences(kind, level):
    logp, behavior, adv, mask = random_batch(4, 6, spread=0.4, seed=11)
    kw = dict(loss_type=kind, importance_sampling_level=level, compute_stats=False)
    (g,) = torch.autograd.grad(policy_loss(logp, behavior, adv, mask, **kw).loss, logp)
    h, base, fd = 1e-6, logp.detach(), torch.zeros_like(g)
    for i, t in mask.nonzero().tolist():
        up, down = base.clone(), base.clone()
        up[i, t] += h
        down[i, t] -= h
        fd[i, t] = (policy_loss(up, behavior, adv, mask, **kw).loss - policy_loss(down, behavior, adv, mask, **kw).loss) / (2 * h)
    assert torch.allclose(g, fd, atol=1e-8)


def test_existing_kernels_agree_with_the_same_reference_loop():
    # The loop is independent of the package; checking it on sapo too guards the loop itself.
    logp, behavior, adv, mask = random_batch(seed=5)
    out = policy_loss(logp, behavior, adv, mask, loss_type="sapo")
    (g,) = torch.autograd.grad(out.loss, logp)
    ref_loss, ref_grad = reference_loss_and_grad("sapo", logp, behavior, adv, mask, "token", "per_response")
    assert float(out.loss.detach()) == pytest.approx(ref_loss, rel=1e-11) and torch.allclose(g, ref_grad, rtol=1e-10)


def test_directional_kernel_is_sapo_on_the_cut_side_and_unclipped_on_the_other():
    z = torch.tensor([[0.5, -0.5, 1.5, -1.5]])
    ones = torch.ones_like(z)
    for a in (1.3, -0.7):
        adv = torch.tensor([a])
        grads = {}
        for kind in ("sapo", "sapo_directional"):
            x = z.clone().requires_grad_(True)
            (grads[kind],) = torch.autograd.grad(policy_loss(x, torch.zeros_like(z), adv, ones, loss_type=kind).loss, x)
        cut = (z > 0) if a > 0 else (z < 0)
        unclipped = -a * torch.exp(z) / 4     # -alpha A r: plain importance weighting
        assert torch.allclose(grads["sapo_directional"][cut], grads["sapo"][cut], rtol=1e-14)
        assert torch.allclose(grads["sapo_directional"][~cut], unclipped[~cut], rtol=1e-14)
        assert bool((grads["sapo"][~cut].abs() < unclipped[~cut].abs()).all())   # SAPO attenuates there


def test_temperatures_reach_each_smooth_kernel_by_advantage_sign():
    logp, behavior, adv, mask = random_batch(seed=2)
    for kind in ("sapo_directional", "gauss"):
        def grad(kind=kind, **kw):
            x = logp.detach().clone().requires_grad_(True)
            return torch.autograd.grad(policy_loss(x, behavior, adv, mask, loss_type=kind, **kw).loss, x)[0]
        base, pos, neg = grad(), grad(tau_pos=3.0), grad(tau_neg=3.0)
        rows_pos, rows_neg = adv > 0, adv < 0
        assert torch.equal(pos[~rows_pos], base[~rows_pos]) and (pos[rows_pos] - base[rows_pos]).abs().max() > 1e-3
        assert torch.equal(neg[~rows_neg], base[~rows_neg]) and (neg[rows_neg] - base[rows_neg]).abs().max() > 1e-3


@pytest.mark.parametrize("kind", ["sapo_directional", "gauss"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_new_kernels_stay_finite_at_extreme_ratios(kind, dtype):
    # Cut side for both signs (A > 0, z >> 0 and A < 0, z << 0), and the harmless other sides.
    z = torch.tensor([[3000.0, -3000.0, 0.3], [-3000.0, 0.2, 0.0], [3000.0, -3000.0, 1.0]], dtype=dtype,
                     requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 0.0], dtype=dtype)
    out = policy_loss(z, torch.zeros_like(z), adv, torch.ones_like(z), loss_type=kind)
    (g,) = torch.autograd.grad(out.loss, z)
    assert torch.isfinite(out.loss) and torch.isfinite(g).all()
    assert g[0, 0] == 0 and g[1, 0] == 0 and torch.equal(g[2], torch.zeros(3, dtype=dtype))
    assert g[0, 1] == 0   # r = e^-3000: the coefficient r w(r) underflows to exactly 0


def test_gaussian_double_backward_matches_finite_differences_of_the_gradient():
    z0 = torch.tensor([[-0.7, 0.1, 0.9]])
    adv = torch.tensor([-1.3])

    def grad_at(z, create_graph=False):
        x = z.clone().requires_grad_(True)
        out = policy_loss(x, torch.zeros_like(x), adv, torch.ones_like(x), loss_type="gauss", compute_stats=False)
        return x, torch.autograd.grad(out.loss, x, create_graph=create_graph)[0]

    x, g = grad_at(z0, create_graph=True)
    (hess_diag,) = torch.autograd.grad(g.sum(), x)   # the loss is separable in tokens: the Hessian is diagonal
    h = 1e-5
    fd = torch.stack([(grad_at(z0 + h * e)[1] - grad_at(z0 - h * e)[1])[0, k] / (2 * h)
                      for k, e in enumerate(torch.eye(3)[:, None, :])])
    assert torch.allclose(hess_diag[0], fd, rtol=1e-6, atol=1e-9)


# --- signal removed, split by sign and side --------------------------------------------------------

def reference_split(kind, logp, behavior, adv, mask, tau_pos=1.0, tau_neg=1.05):
    """Per-cell removed fraction and share of the unclipped signal alpha |A| r, by explicit loops."""
    lengths = mask.sum(-1).tolist()
    n = sum(1 for x in lengths if x > 0)
    mass = {c: 0.0 for c in SIGNAL_CELLS}
    lost = {c: 0.0 for c in SIGNAL_CELLS}
    total_mass = total_lost = 0.0
    for i, t in mask.nonzero().tolist():
        a = float(adv[i])
        if a == 0:
            continue
        r = math.exp(float(logp[i, t] - behavior[i, t]))
        m = abs(a) * r / (lengths[i] * n)
        w = reference_gate(kind, r, a, tau_pos if a > 0 else tau_neg)
        total_mass += m
        total_lost += m * (1 - w)
        if r != 1.0:
            cell = ("pos" if a > 0 else "neg", "below" if r < 1 else "above")
            mass[cell] += m
            lost[cell] += m * (1 - w)
    return total_lost / total_mass, {c: lost[c] / mass[c] for c in SIGNAL_CELLS}, \
        {c: mass[c] / total_mass for c in SIGNAL_CELLS}


@pytest.mark.parametrize("kind", KERNELS)
def test_signal_removed_split_matches_per_token_loop(kind):
    logp, behavior, adv, mask = random_batch(8, 9, spread=0.8, seed=9)
    s = policy_loss(logp, behavior, adv, mask, loss_type=kind).stats
    overall, removed, share = reference_split(kind, logp.detach(), behavior, adv, mask)
    assert s["signal_removed_frac"] == pytest.approx(overall, rel=1e-10, abs=1e-15)
    for sign, side in SIGNAL_CELLS:
        assert s[f"signal_removed_frac_{sign}_{side}"] == pytest.approx(removed[sign, side], rel=1e-10, abs=1e-15)
        assert s[f"signal_share_{sign}_{side}"] == pytest.approx(share[sign, side], rel=1e-10)
    total = sum(s[f"signal_share_{c}_{d}"] * s[f"signal_removed_frac_{c}_{d}"] for c, d in SIGNAL_CELLS)
    assert total == pytest.approx(s["signal_removed_frac"], rel=1e-10)


def test_which_cells_each_kernel_touches():
    logp, behavior, adv, mask = random_batch(8, 9, spread=0.8, seed=9)
    split = {k: policy_loss(logp, behavior, adv, mask, loss_type=k).stats for k in KERNELS}
    # Directional kernels never remove the corrective side (A > 0, r < 1) or (A < 0, r > 1) ...
    for kind in ("grpo", "sapo_directional"):
        assert split[kind]["signal_removed_frac_pos_below"] == 0 and split[kind]["signal_removed_frac_neg_above"] == 0
    # ... bidirectional ones remove something in every cell.
    for kind in ("sapo", "gauss"):
        assert all(split[kind][f"signal_removed_frac_{c}_{d}"] > 0 for c, d in SIGNAL_CELLS)
    # On the cut side the directional smooth clip removes exactly what SAPO does.
    for cell in ("pos_above", "neg_below"):
        assert split["sapo_directional"][f"signal_removed_frac_{cell}"] == pytest.approx(
            split["sapo"][f"signal_removed_frac_{cell}"], rel=1e-12)


def test_split_with_no_signal_reports_nan_cells_not_zero():
    z = torch.zeros(2, 3, requires_grad=True)
    s = policy_loss(z, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.ones(2, 3)).stats
    assert s["signal_removed_frac"] == 0.0
    assert all(math.isnan(s[f"signal_removed_frac_{c}_{d}"]) for c, d in SIGNAL_CELLS)   # r = 1: neither side
    assert all(s[f"signal_share_{c}_{d}"] == 0.0 for c, d in SIGNAL_CELLS)


def test_new_loss_types_are_offered_and_bad_options_still_raise():
    assert {"sapo_directional", "gauss"} <= set(LOSS_TYPES)
    for kind, bad in (("gauss", dict(tau_neg=0.0)), ("sapo_directional", dict(tau_pos=-1.0))):
        for compute_stats in (True, False):   # validated up front, not only when the stats happen to need tau
            with pytest.raises(ValueError, match="tau"):
                policy_loss(*random_batch(), loss_type=kind, compute_stats=compute_stats, **bad)


# --- config and training wiring --------------------------------------------------------------------

def test_config_accepts_every_loss_type_and_rejects_others():
    from sapo_lab.runs.config import load_config

    for kind in LOSS_TYPES:
        assert load_config("cpu-tiny", {"loss_type": kind}).loss.loss_type == kind
    with pytest.raises(ValueError, match="loss_type"):
        load_config("cpu-tiny", {"loss_type": "gaussian"})


@pytest.mark.parametrize("kind", ["sapo_directional", "gauss"])
def test_micro_training_run_uses_the_new_kernel(tmp_path, monkeypatch, kind):
    from _micro import micro

    import sapo_lab.training.trainer as trainer_mod
    import sapo_lab.training.update as update_mod

    torch.set_default_dtype(torch.float32)  # the trainer's own dtype
    seen = []
    real = update_mod.policy_loss

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append((kwargs["loss_type"], kwargs["tau_pos"], kwargs["tau_neg"], out.stats))
        return out

    monkeypatch.setattr(update_mod, "policy_loss", spy)
    cfg = micro(loss_type=kind, max_steps=2, sapo_temperature_pos=0.7, sapo_temperature_neg=1.9)
    summary = trainer_mod.train(cfg, str(tmp_path), reward_fn=parity_reward, **QUIET)
    assert summary["loss_type"] == kind and summary["status"] == "completed"
    assert seen and all(s[:3] == (kind, 0.7, 1.9) for s in seen)
    assert all(s[3]["loss_type"] == kind and "signal_removed_frac_pos_above" in s[3] for s in seen)
    # Minibatches after the first are off-policy, so the kernel really acted on ratios != 1.
    assert any(s[3]["max_abs_log_ratio"] > 0 for s in seen)
