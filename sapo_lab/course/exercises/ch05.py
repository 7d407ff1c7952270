"""Chapter 5's coded exercises: SAPO's gate f_tau, its weight w_tau, and the temperature chosen by the sign
of the advantage."""

from __future__ import annotations

import math

import torch

from ...objective.gates import centered_soft_gate, gate_weight, soft_gate, token_temperatures, update_coefficient
from ..checks import Exercise
from ..mistakes import SAPO_GATE, SAPO_LOSS, Mistake

E5 = math.exp(5.0)


def _ratios(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _gate_cases() -> list[dict]:
    """r = 1 exactly (where f_tau = 2 / tau and w_tau = 1), ratios on both sides, r = 0, e^5 and e^-5 (where
    the gate saturates), tau = 1 (where 4 / tau and 4 tau agree), narrow and wide gates, and one temperature
    per token given as a tensor."""
    grid = _ratios(1.0, 0.0, 0.5, 0.9, 1.2, 2.0, E5, 1 / E5)
    per_token = torch.tensor([0.5, 1.0, 1.05, 2.0, 4.0, 0.25, 3.0, 1.5], dtype=torch.float64)
    return [dict(ratio=grid, tau=1.0), dict(ratio=grid, tau=1.05), dict(ratio=grid, tau=4.0),
            dict(ratio=grid, tau=0.5), dict(ratio=grid, tau=per_token)]


GATE_MISTAKES = SAPO_GATE + (
    Mistake("the centred curve f_tau - 2 / tau returned (the chapter's centered_soft_gate), not f_tau",
            "f_tau itself is (4 / tau) sigmoid(tau (r - 1)), which is 2 / tau at r = 1; centring only shifts it",
            centered_soft_gate),
)


# ---- 05.w_tau: the derivative of f_tau in r ------------------------------------------------------------------
def _sig(ratio, tau, shift=1.0):
    return torch.sigmoid(torch.as_tensor(tau, dtype=ratio.dtype) * (ratio - shift))


def _bell(ratio, tau, shift=1.0):
    s = _sig(ratio, tau, shift)
    return s * (1 - s)


GATE_WEIGHT_MISTAKES = (
    Mistake("the factor 4 left out: sigma(u)(1 - sigma(u)) is 1/4 at r = 1",
            "w_tau(r) = 4 sigma(u)(1 - sigma(u)); the 4 makes w_tau(1) = 1",
            lambda ratio, tau: _bell(ratio, tau)),
    Mistake("the chain rule's factor tau left out: (4 / tau) sigma(u)(1 - sigma(u))",
            "differentiating sigma(tau (r - 1)) in r brings out a factor tau, which cancels the 4 / tau: "
            "w_tau = 4 sigma(u)(1 - sigma(u))",
            lambda ratio, tau: 4 / torch.as_tensor(tau, dtype=ratio.dtype) * _bell(ratio, tau)),
    Mistake("the slope of the bare sigmoid, tau sigma(u)(1 - sigma(u)): the 4 / tau prefactor left out",
            "differentiate f_tau = (4 / tau) sigma(tau (r - 1)), prefactor included: w_tau = 4 sigma(u)(1 - sigma(u))",
            lambda ratio, tau: torch.as_tensor(tau, dtype=ratio.dtype) * _bell(ratio, tau)),
    Mistake("the sigmoid not centred at r = 1 (u = tau * r)",
            "the argument is u = tau * (r - 1)",
            lambda ratio, tau: 4 * _bell(ratio, tau, shift=0.0)),
    Mistake("the update coefficient r * w_tau(r) returned: the derivative in log p, not in r",
            "w_tau is the derivative in r, 4 sigmoid(u)(1 - sigmoid(u)); the factor r comes later, from dr / dlog p",
            update_coefficient),
    Mistake("the gate f_tau itself returned instead of its derivative w_tau",
            "w_tau is the derivative of f_tau in r: 4 sigma(u)(1 - sigma(u))",
            soft_gate),
)


# ---- 05.sapo_objective: ratio (B, T), adv (B,), tau_pos, tau_neg -> (B, T) ---------------------------------------
def sapo_objective(ratio, adv, tau_pos, tau_neg):
    """A_i f_tau(r_{i,t}) with tau = tau_pos where A_i > 0 and tau_neg where A_i <= 0 (an objective to maximize)."""
    a = adv[:, None].expand_as(ratio)
    return a * soft_gate(ratio, token_temperatures(a, tau_pos, tau_neg))


def _objective_cases() -> list[dict]:
    """Positive, negative and zero advantages, each with ratios on both sides of 1 (so choosing tau by the
    ratio's side differs from choosing it by the sign of A), far ratios, the paper's temperatures (1, 1.05)
    and two far apart (0.5, 2)."""
    gen = torch.Generator().manual_seed(2051)
    ratio = torch.exp(0.6 * torch.randn(4, 5, generator=gen, dtype=torch.float64))
    ratio[:, 0], ratio[:, 1] = 0.7, 1.4  # one token below and one above r = 1 in every response
    ratio[1, 4], ratio[2, 4] = E5, 1 / E5
    adv = torch.tensor([1.2, -0.8, 0.5, 0.0], dtype=torch.float64)
    return [dict(ratio=ratio, adv=adv, tau_pos=1.0, tau_neg=1.05),
            dict(ratio=ratio.flip(0), adv=-adv.flip(0), tau_pos=0.5, tau_neg=2.0)]


def _objective_with(temperature, *, sign=1.0, prefactor=True, centred=False):
    def compute(ratio, adv, tau_pos, tau_neg):
        a = adv[:, None].expand_as(ratio)
        side = {"advantage": a > 0, "ratio": ratio > 1, "swapped": a <= 0,
                "single": torch.ones_like(a, dtype=torch.bool)}[temperature]
        tau = torch.where(side, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
        gate = torch.sigmoid(tau * (ratio - 1)) - (0.5 if centred else 0.0)
        return sign * a * (4 / tau * gate if prefactor else gate)
    return compute


def _catalogued(words: str, compute) -> Mistake:
    """The catalogue's wording (name and fix) for the SAPO loss mistake whose name contains ``words``."""
    (found,) = [m for m in SAPO_LOSS if words in m.name]
    return Mistake(found.name, found.fix, compute)


OBJECTIVE_MISTAKES = (
    _catalogued("ratio's side", _objective_with("ratio")),
    _catalogued("tau_pos and tau_neg swapped", _objective_with("swapped")),
    _catalogued("one temperature", _objective_with("single")),
    _catalogued("4 / tau prefactor left out", _objective_with("advantage", prefactor=False)),
    Mistake("the centred gate f_tau - 2 / tau used: the same gradient, but not the objective asked for",
            "use f_tau itself, (4 / tau) sigmoid(tau (r - 1)); centring shifts each response's value by -2 A / tau",
            _objective_with("advantage", centred=True)),
    Mistake("the loss -A f_tau(r) returned instead of the objective A f_tau(r)",
            "return the objective to maximize, A * f_tau(r); the minus sign belongs to the loss",
            _objective_with("advantage", sign=-1.0)),
)


EXERCISES = [
    Exercise(id="05.f_tau", function="f_tau", reference=soft_gate, cases=_gate_cases, mistakes=GATE_MISTAKES,
             grad_wrt=("ratio",)),
    Exercise(id="05.w_tau", function="w_tau", reference=gate_weight, cases=_gate_cases,
             mistakes=GATE_WEIGHT_MISTAKES),
    Exercise(id="05.sapo_objective", function="sapo_objective", reference=sapo_objective, cases=_objective_cases,
             mistakes=OBJECTIVE_MISTAKES, grad_wrt=("ratio",)),
]
