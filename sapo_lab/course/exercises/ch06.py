"""Chapter 6's coded exercises: the update coefficient c_tau(r) = r w_tau(r) and where it peaks."""

from __future__ import annotations

import math

import torch

from ...objective.gates import gate_weight, update_coefficient
from ..checks import Exercise
from ..mistakes import Mistake


# ---- 06.coefficient: coefficient(ratio, tau) -> c_tau(r), the shape of ratio --------------------------------------
def _coefficient_cases() -> list[dict]:
    """r = 1 (where c = 1 exactly), ratios far below and above one (e^5, whose coefficient underflows towards 0),
    a random batch, and temperatures far enough apart that a missing 1/2 or 4 shows."""
    gen = torch.Generator().manual_seed(606)
    batch = torch.rand(3, 5, generator=gen, dtype=torch.float64) * 3.9 + 0.05
    edges = torch.tensor([1.0, 0.25, 0.9, 1.3, 2.6, math.exp(5.0)], dtype=torch.float64)
    return [dict(ratio=edges, tau=1.7), dict(ratio=batch, tau=0.4),
            dict(ratio=torch.tensor([1e-3, 1.0, 12.0], dtype=torch.float64), tau=4.0)]


def _sech2(x):
    return 1.0 / torch.cosh(x) ** 2


COEFFICIENT = (
    Mistake("the gate weight w_tau(r) returned without the factor r",
            "multiply by r: the parameters see grad r = r grad log p, so the multiplier is c = r w_tau(r)",
            lambda ratio, tau: gate_weight(ratio, tau)),
    Mistake("tau (r - 1) not halved inside sech^2",
            "w_tau(r) = sech^2(tau (r - 1) / 2): the 1/2 comes from sigma(u)(1 - sigma(u)) = 1 / (4 cosh^2(u / 2))",
            lambda ratio, tau: ratio * _sech2(tau * (ratio - 1.0))),
    Mistake("the factor 4 of w = 4 sigma(u)(1 - sigma(u)) left out",
            "w_tau(r) = 4 sigma(u)(1 - sigma(u)) with u = tau (r - 1); it makes w_tau(1) = 1",
            lambda ratio, tau: ratio * gate_weight(ratio, tau) / 4.0),
    Mistake("sech not squared: r / cosh(tau (r - 1) / 2)",
            "w_tau(r) = sech^2(tau (r - 1) / 2) = 1 / cosh(tau (r - 1) / 2) ** 2",
            lambda ratio, tau: ratio / torch.cosh(tau * (ratio - 1.0) / 2)),
    Mistake("the surrogate f_tau(r) = (4 / tau) sigmoid(tau (r - 1)) returned instead of r times its derivative",
            "differentiate f_tau: its derivative is w_tau(r), and the coefficient is r w_tau(r)",
            lambda ratio, tau: 4.0 / tau * torch.sigmoid(tau * (ratio - 1.0))),
)


# ---- 06.peak: coefficient_peak(tau) -> (r_star, c_star) ---------------------------------------------------------
def peak_of_update_coefficient(tau: float) -> tuple[float, float]:
    """The reference: where the package's c_tau'(r) (by autograd) changes sign. c rises on (0, 1] (c'(1) = 1)
    and has a single maximum to the right of 1, inside (1, 1 + 3 / tau] (there tau r tanh(tau (r - 1) / 2) > 1).
    Each round evaluates the slope at 65 points of the bracket at once and keeps the cell where it turns."""
    lo, hi = 1.0, 1.0 + 3.0 / tau
    for _ in range(20):
        points = torch.linspace(lo, hi, 65, dtype=torch.float64, requires_grad=True)
        (slopes,) = torch.autograd.grad(update_coefficient(points, tau).sum(), points)
        rising = int((slopes > 0).sum())  # the slope is positive before r*, negative after
        edges = points.detach()
        lo, hi = float(edges[max(rising - 1, 0)]), float(edges[min(rising, 64)])
        if hi - lo <= 1e-15 * hi:
            break
    r_star = 0.5 * (lo + hi)
    return r_star, float(update_coefficient(torch.tensor(r_star, dtype=torch.float64), tau))


def _peak_cases() -> list[dict]:
    """Temperatures from wide (the peak near r = 5.6) to sharp (near r = 1.08); none of the chapter's own."""
    return [dict(tau=0.3), dict(tau=0.8), dict(tau=1.7), dict(tau=5.0)]


def _peak_at_one(tau):
    return 1.0, 1.0


def _peak_of_doubled_tau(tau):
    return peak_of_update_coefficient(2.0 * tau)


def _peak_with_gate_value(tau):
    r_star, _ = peak_of_update_coefficient(tau)
    return r_star, float(gate_weight(torch.tensor(r_star, dtype=torch.float64), tau))


PEAK = (
    Mistake("r* taken where the gate w peaks (r = 1), not where the coefficient c = r w peaks",
            "c'(1) = w(1) + 1 * w'(1) = 1 > 0, so c still rises at r = 1: solve c'(r) = 0, i.e. "
            "tau r tanh(tau (r - 1) / 2) = 1, for r > 1",
            _peak_at_one),
    Mistake("the peak of r sech^2(tau (r - 1)): the 1/2 inside sech^2 left out (that is c at temperature 2 tau)",
            "w_tau(r) = sech^2(tau (r - 1) / 2), so c'(r) = 0 becomes tau r tanh(tau (r - 1) / 2) = 1",
            _peak_of_doubled_tau),
    Mistake("c_star is the gate w(r*), not the coefficient r* w(r*)",
            "return c_tau(r*) = r* w_tau(r*), the height of the coefficient's peak",
            _peak_with_gate_value),
)


EXERCISES = [
    Exercise(id="06.coefficient", function="coefficient", reference=update_coefficient, cases=_coefficient_cases,
             mistakes=COEFFICIENT),
    # the statement asks for a relative error below 1e-5 (a bounded scalar minimiser's default accuracy); the
    # nearest mistake is off by more than 1e-2
    Exercise(id="06.peak", function="coefficient_peak", reference=peak_of_update_coefficient, cases=_peak_cases,
             mistakes=PEAK, rtol=2e-5, atol=1e-9),
]
