"""Sample sizes for unpaired and paired designs (sapo_lab.evidence.analysis), against scipy and hand-worked cases."""

import math

import pytest
from scipy import stats

from sapo_lab.evidence.paired import paired_sample_size, pooled_sd, two_sample_size, two_sample_t_power


def test_pooled_sd_removes_each_groups_own_mean():
    # catches pooling around the grand mean (a shift between groups would inflate the SD)
    # and dividing by the number of values instead of the degrees of freedom
    groups = [[1.0, 3.0], [10.0, 14.0, 12.0]]
    sd, df = pooled_sd(groups)
    assert df == 3
    assert sd == pytest.approx(math.sqrt((2.0 + 8.0) / 3))  # squares: 1 + 1 and 4 + 4 + 0


def test_pooled_sd_skips_single_values_and_refuses_nothing_to_pool():
    # catches a one-value group counted with df 0 as a division by zero, or a silent NaN
    assert pooled_sd([[5.0], [1.0, 2.0]]) == (pytest.approx(math.sqrt(0.5)), 1)
    with pytest.raises(ValueError, match="at least one group"):
        pooled_sd([[1.0], [2.0]])
    with pytest.raises(ValueError, match="finite"):
        pooled_sd([[1.0, float("nan")]])


@pytest.mark.parametrize("n, effect, sd", [(5, 0.1, 0.2), (20, 0.1, 0.22), (40, -0.05, 0.1)])
def test_two_sample_power_matches_scipy_noncentral_t(n, effect, sd):
    # catches the paired standard error sd/sqrt(n) used where two independent means need sd*sqrt(2/n),
    # and the paired df n-1 used instead of 2n-2
    df, ncp = 2 * n - 2, abs(effect) / (sd * math.sqrt(2 / n))
    c = stats.t.ppf(0.975, df)
    expected = stats.nct.sf(c, df, ncp) + stats.nct.cdf(-c, df, ncp)
    assert two_sample_t_power(n, effect, sd) == pytest.approx(expected, abs=1e-4)


def test_two_sample_size_is_the_first_n_with_enough_power():
    # catches an off-by-one search and a normal-approximation shortcut that undercounts small n
    n = two_sample_size(0.1, 0.2)
    power = [stats.nct.sf(stats.t.ppf(0.975, 2 * m - 2), 2 * m - 2, 0.1 / (0.2 * math.sqrt(2 / m))) for m in (n - 1, n)]
    assert power[0] < 0.8 <= power[1] + 1e-4
    normal = 2 * (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) ** 2 * 0.2**2 / 0.1**2
    assert normal < n <= normal + 2  # the t-test needs slightly more than the normal formula


def test_pairing_helps_exactly_when_the_shared_part_cancels():
    # catches a paired and an unpaired calculation that ignore the SD they are given: with no shared
    # variance the paired SD is sqrt(2) x one run's SD and pairing buys (almost) nothing
    sd_run = 0.2
    unpaired = two_sample_size(0.1, sd_run)
    no_sharing = paired_sample_size(0.1, math.sqrt(2) * sd_run)
    assert abs(no_sharing - unpaired) <= 1
    assert paired_sample_size(0.1, 0.1) < unpaired / 5  # most of the variance shared: far fewer runs


def test_two_sample_size_refuses_bad_input():
    # catches a zero effect looping to max_runs, and a power of 80 meant as 0.8
    with pytest.raises(ValueError, match="nonzero"):
        two_sample_size(0.0, 0.1)
    with pytest.raises(ValueError, match="power"):
        two_sample_size(0.1, 0.1, power=80)
    with pytest.raises(ValueError, match="> 0"):
        two_sample_t_power(5, 0.1, 0.0)
