"""Chapter 6's reference peak against an independent root finder: the check grades students against it."""
import math

import pytest
from scipy.optimize import brentq

from sapo_lab.course.exercises.ch06 import peak_of_update_coefficient


@pytest.mark.parametrize("tau", [0.3, 1.05, 5.0])
def test_the_reference_peak_solves_the_stationarity_equation_to_float64(tau):
    """Catches a bisection stopped early (a loose tolerance) or a wrong bracket. c(r) = r sech^2(tau (r - 1) / 2)
    has c'(r) = sech^2(.) (1 - tau r tanh(tau (r - 1) / 2)), so r* solves tau r tanh(tau (r - 1) / 2) = 1,
    which brentq finds on (1, 1 + 3 / tau] without the package."""
    def stationarity(r):
        return tau * r * math.tanh(tau * (r - 1) / 2) - 1

    r_expected = brentq(stationarity, 1.0, 1.0 + 3.0 / tau, xtol=1e-15, rtol=1e-15)
    c_expected = r_expected / math.cosh(tau * (r_expected - 1) / 2) ** 2
    r_star, c_star = peak_of_update_coefficient(tau)
    assert r_star == pytest.approx(r_expected, rel=1e-10)
    assert c_star == pytest.approx(c_expected, rel=1e-12)
