"""The finite-sample corrections of the statistics, each against an independent computation on a small sample
(where n and n - 1 differ by a third, so a dropped correction cannot hide inside a tolerance).

Catches: a standard deviation divided by n instead of n - 1 (paired SD, pooled SD, the seed spread, a Pass@1
interval, a family's variance in the weighted aggregate), a t quantile with n degrees of freedom (or the normal
1.96) instead of n - 1, an unpaired power with 2n instead of 2n - 2 degrees of freedom, and a Monte Carlo
p-value without the observed pattern counted (which can be 0).
"""

import math
import statistics

import pytest
from scipy import stats

from sapo_lab.evidence import paired as P
from sapo_lab.evidence.results import spread
from sapo_lab.studies.per_family import ScoredPrompt, weighted_pass1
from sapo_lab.training.evaluation import mean_ci

DIFFS = [0.10, -0.02, 0.07, 0.01]  # n = 4: n - 1 = 3


def test_paired_sd_and_t_interval_use_n_minus_1():
    n, mean, sd = len(DIFFS), statistics.mean(DIFFS), statistics.stdev(DIFFS)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    assert P.t_interval(DIFFS) == pytest.approx((mean - half, mean + half), rel=1e-12)
    assert P.compare({s: (d, 0.0) for s, d in enumerate(DIFFS)}).sd == pytest.approx(sd, rel=1e-12)
    t = mean / (sd / math.sqrt(n))
    assert P.paired_t_test(DIFFS) == pytest.approx(2 * stats.t.sf(abs(t), n - 1), rel=1e-10)


def test_pooled_sd_has_n_minus_groups_degrees_of_freedom():
    groups = [[1.0, 2.0, 4.0], [3.0, 3.5]]
    squares = sum((v - statistics.mean(g)) ** 2 for g in groups for v in g)
    assert P.pooled_sd(groups) == pytest.approx((math.sqrt(squares / 3), 3), rel=1e-12)


def test_the_seed_spread_is_the_sample_sd():
    values = [0.4, 0.5, 0.9]
    assert spread(values)["sd"] == pytest.approx(statistics.stdev(values), rel=1e-12)


def test_a_pass1_interval_uses_the_sample_variance():
    values = [0.0, 0.5, 1.0, 1.0]
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values))
    mean = statistics.mean(values)
    assert mean_ci(values) == pytest.approx((mean, mean - half, min(1.0, mean + half)), rel=1e-12)


def test_the_weighted_aggregate_uses_each_familys_sample_variance():
    a = [ScoredPrompt("a", 1, c) for c in ((True, False), (True, True), (False, False))]
    b = [ScoredPrompt("b", 1, c) for c in ((True, True), (False, True))]
    rates = {"a": [0.5, 1.0, 0.0], "b": [1.0, 0.5]}
    weights = {"a": 0.25, "b": 0.75}
    mean = sum(w * statistics.mean(rates[f]) for f, w in weights.items())
    se = math.sqrt(sum(w * w * statistics.variance(rates[f]) / len(rates[f]) for f, w in weights.items()))
    out = weighted_pass1(a + b, weights)
    assert out["pass1"] == pytest.approx(mean, rel=1e-12)
    assert out["pass1_ci95"] == pytest.approx([mean - 1.96 * se, min(1.0, mean + 1.96 * se)], rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_power_uses_the_tests_degrees_of_freedom(n):
    effect, sd = 0.1, 0.08
    paired_ncp = effect * math.sqrt(n) / sd
    c = stats.t.ppf(0.975, n - 1)
    expected = stats.nct.sf(c, n - 1, paired_ncp) + stats.nct.cdf(-c, n - 1, paired_ncp)
    assert P.paired_t_power(n, effect, sd) == pytest.approx(expected, rel=1e-9)
    df, ncp = 2 * n - 2, effect / (sd * math.sqrt(2.0 / n))
    c = stats.t.ppf(0.975, df)
    expected = stats.nct.sf(c, df, ncp) + stats.nct.cdf(-c, df, ncp)
    assert P.two_sample_t_power(n, effect, sd) == pytest.approx(expected, rel=1e-9)


def test_a_monte_carlo_permutation_p_counts_the_observed_pattern():
    # 20 equal differences: only the two all-same-sign patterns reach the observed |sum|, so with 200 resamples
    # (seeded) no resample hits and the p-value is 1 / 201, never 0
    assert P.permutation_test([0.1] * 20, exact_up_to=16, resamples=200) == pytest.approx(1 / 201)
