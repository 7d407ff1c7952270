"""Gate, coefficient and clip formulas against sympy, finite differences and direct formulas."""

import math

import pytest
import sympy as sp
import torch

from sapo_lab import (
    centered_soft_gate,
    clip_is_active,
    gate_weight,
    log_gate_weight,
    log_update_coefficient_from_log_ratio,
    ppo_clip_derivative,
    ppo_clip_surrogate,
    soft_gate,
    update_coefficient,
)

R, TAU = sp.symbols("r tau", positive=True)
F_SYM = (4 / TAU) / (1 + sp.exp(-TAU * (R - 1)))
W_SYM = sp.diff(F_SYM, R)
C_SYM = R * W_SYM
W_NUM = sp.lambdify((R, TAU), W_SYM, "mpmath")
DW_NUM = sp.lambdify((R, TAU), sp.diff(W_SYM, R), "mpmath")
C_NUM = sp.lambdify((R, TAU), C_SYM, "mpmath")

RATIOS = [0.01, 0.1, 0.5, 0.8, 0.95, 1.0, 1.05, 1.2, 2.0, 3.0, 4.0, 10.0, 30.0]
TAUS = [0.1, 0.5, 1.0, 1.05, 2.0, 7.0]


@pytest.mark.parametrize("tau", TAUS)
def test_gate_weight_equals_sympy_derivative(tau):
    r = torch.tensor(RATIOS, dtype=torch.float64)
    expected = torch.tensor([float(W_NUM(x, tau)) for x in RATIOS], dtype=torch.float64)
    assert torch.allclose(gate_weight(r, tau), expected, rtol=1e-12, atol=1e-300)
    coef = torch.tensor([float(C_NUM(x, tau)) for x in RATIOS], dtype=torch.float64)
    assert torch.allclose(update_coefficient(r, tau), coef, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("tau", TAUS)
def test_soft_gate_autograd_first_and_second_derivative(tau):
    r = torch.tensor(RATIOS, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(soft_gate(r, tau).sum(), r, create_graph=True)
    assert torch.allclose(g, gate_weight(r.detach(), tau), rtol=1e-12)
    (h,) = torch.autograd.grad(g.sum(), r)
    expected = torch.tensor([float(DW_NUM(x, tau)) for x in RATIOS], dtype=torch.float64)
    # soft_gate is the plain sigmoid formula: its tails lose relative (not absolute) precision.
    assert torch.allclose(h, expected, rtol=1e-9, atol=1e-13)


def test_sech_squared_identity_symbolic_and_numeric():
    assert sp.simplify((W_SYM - sp.sech(TAU * (R - 1) / 2) ** 2).rewrite(sp.exp)) == 0
    r = torch.linspace(-5, 8, 2001, dtype=torch.float64)
    for tau in TAUS:
        assert torch.allclose(gate_weight(r, tau), torch.cosh(tau * (r - 1) / 2) ** -2, rtol=1e-12)


def test_log_gate_weight_matches_log_of_direct_formula():
    r = torch.linspace(0.0, 6.0, 301, dtype=torch.float64)
    for tau in TAUS:
        # 4 e^-u / (1 + e^-u)^2 has no cancellation; its log is log 4 - u - 2 log(1 + e^-u).
        u = tau * (r - 1)
        direct = math.log(4) - u - 2 * torch.log1p(torch.exp(-u))
        assert torch.allclose(log_gate_weight(r, tau), direct, rtol=1e-12, atol=1e-12)


def test_gate_is_one_at_center_for_every_tau_and_taylor_expansion():
    for tau in TAUS:
        assert float(gate_weight(torch.tensor(1.0, dtype=torch.float64), tau)) == 1.0
    d = sp.symbols("d")
    series = sp.series(W_SYM.subs(R, 1 + d), d, 0, 4).removeO()
    assert sp.simplify(series - (1 - TAU**2 * d**2 / 4)) == 0


@pytest.mark.parametrize("ratio,w,c", [(0.5, 0.9400, 0.4700), (2.0, 0.7864, 1.5729), (4.0, 0.1807, 0.7228)])
def test_review_numbers(ratio, w, c):
    x = torch.tensor(ratio, dtype=torch.float64)
    assert round(float(gate_weight(x, 1.0)), 4) == w
    assert round(float(update_coefficient(x, 1.0)), 4) == c


def test_centered_gate_is_shifted_gate_and_zero_at_center():
    r = torch.linspace(0, 5, 101, dtype=torch.float64)
    for tau in TAUS:
        assert torch.allclose(centered_soft_gate(r, tau), soft_gate(r, tau) - 2 / tau, atol=1e-13)
        assert float(centered_soft_gate(torch.tensor(1.0), tau)) == 0.0


def test_tails_never_produce_nan():
    r = torch.tensor([0.0, 1e30, float("inf")], dtype=torch.float64)
    w = gate_weight(r, 1.0)
    c = update_coefficient(r, 1.0)
    assert torch.isfinite(w).all() and torch.isfinite(c).all()
    assert float(c[2]) == 0.0 and float(w[2]) == 0.0
    assert abs(float(w[0]) - 1 / math.cosh(0.5) ** 2) < 1e-15
    z = torch.tensor([1e4, -1e4, 0.0], dtype=torch.float32)
    assert torch.equal(torch.exp(log_update_coefficient_from_log_ratio(z, 1.0)), torch.tensor([0.0, 0.0, 1.0]))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_temperature_raises(bad):
    with pytest.raises(ValueError, match="tau"):
        gate_weight(torch.tensor(1.0), bad)


def test_clip_derivative_matches_sympy_piecewise_and_finite_differences():
    eps_low, eps_high = 0.2, 0.28
    a = sp.symbols("A", real=True)
    surrogate = sp.Min(R * a, sp.Max(sp.Min(R, 1 + sp.Rational(28, 100)), 1 - sp.Rational(2, 10)) * a)
    grid = [0.3, 0.7, 0.79, 0.81, 1.0, 1.19, 1.27, 1.29, 2.0, 5.0]
    for adv in (1.7, -0.6):
        for x in grid:
            sym = float(sp.diff(surrogate.subs(a, adv), R).subs(R, x))
            pkg = float(ppo_clip_derivative(torch.tensor(x, dtype=torch.float64), adv, eps_low, eps_high))
            h = 1e-6
            fd = float((ppo_clip_surrogate(torch.tensor(x + h, dtype=torch.float64), adv, eps_low, eps_high)
                        - ppo_clip_surrogate(torch.tensor(x - h, dtype=torch.float64), adv, eps_low, eps_high)) / (2 * h))
            assert sym == pytest.approx(pkg, abs=1e-12) == pytest.approx(fd, abs=1e-6)


def test_clipping_is_directional():
    assert bool(clip_is_active(torch.tensor(0.5), torch.tensor(1.0)))
    assert bool(clip_is_active(torch.tensor(2.0), torch.tensor(-1.0)))
    assert not bool(clip_is_active(torch.tensor(2.0), torch.tensor(1.0)))
    assert not bool(clip_is_active(torch.tensor(0.5), torch.tensor(-1.0)))
    with pytest.raises(ValueError):
        ppo_clip_surrogate(torch.tensor(1.0), 1.0, eps_low=1.5)
