"""sapo_lab.evidence.paired against scipy (a test-only reference) and hand-worked cases."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from sapo_lab.evidence import paired as P

DIFFS = [-0.201, -0.062, -0.065, -0.208, 0.01]


@pytest.mark.parametrize("df", [1, 2, 5, 30])
def test_t_distribution_matches_scipy(df):
    # catches a wrong tail (upper vs lower), a wrong incomplete-beta branch, or df off by one
    for t in (-6.0, -1.3, 0.0, 0.4, 2.5):
        assert P.t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-10)
    for p in (0.025, 0.5, 0.975, 0.999):
        assert P.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), abs=1e-8)


def test_t_interval_and_test_match_scipy():
    # catches a normal quantile in place of t, the population SD, or sqrt(n-1) in the standard error
    lo, hi = P.t_interval(DIFFS, 0.05)
    ref = stats.t.interval(0.95, len(DIFFS) - 1, loc=np.mean(DIFFS), scale=stats.sem(DIFFS))
    assert (lo, hi) == pytest.approx(ref, abs=1e-10)
    assert P.paired_t_test(DIFFS) == pytest.approx(stats.ttest_1samp(DIFFS, 0).pvalue, abs=1e-10)


def test_sign_test_is_exact_and_drops_ties():
    # 1 of 5 above: scipy's exact binomial test; a tie counted as a loss would give 6 trials instead
    assert P.sign_test(DIFFS) == pytest.approx(stats.binomtest(1, 5).pvalue, abs=1e-12)
    assert P.sign_test(DIFFS + [0.0]) == pytest.approx(stats.binomtest(1, 5).pvalue, abs=1e-12)
    assert P.sign_test([-1.0, -2.0, -3.0]) == pytest.approx(0.25)  # the smallest p three pairs allow
    assert P.sign_test([0.0, 0.0]) == 1.0


@pytest.mark.parametrize("diffs", [[0.1, -0.2], [0.3, -0.1, 0.2, -0.4], [0.1, -0.1, 0.0, 0.2, -0.3, 0.0]])
def test_sign_test_with_as_many_pairs_above_as_below_has_p_one(diffs):
    # catches: sign test p not capped at 1 (twice the tail of an even split is above 1: 1.5 for one pair each side)
    above, below = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    assert P.sign_test(diffs) == stats.binomtest(above, above + below).pvalue == 1.0


def test_permutation_test_exact_and_monte_carlo():
    # exact enumeration against scipy; the Monte Carlo branch must agree within its sampling error
    ref = stats.permutation_test((np.array(DIFFS),), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert P.permutation_test(DIFFS) == pytest.approx(ref, abs=1e-12)
    rng = np.random.default_rng(3)
    many = list(rng.normal(-0.05, 0.1, size=18))
    exact = stats.permutation_test((np.array(many),), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert P.permutation_test(many, exact_up_to=16, resamples=20000) == pytest.approx(exact, abs=0.01)


def test_bootstrap_interval_against_numpy():
    # an independent percentile bootstrap: catches resampling without replacement (interval collapses to the mean)
    lo, hi = P.bootstrap_interval(DIFFS, 0.05, resamples=20000, seed=1)
    rng = np.random.default_rng(0)
    means = rng.choice(DIFFS, size=(200000, len(DIFFS)), replace=True).mean(axis=1)
    assert lo == pytest.approx(np.quantile(means, 0.025), abs=0.01)
    assert hi == pytest.approx(np.quantile(means, 0.975), abs=0.01)
    assert lo < np.mean(DIFFS) < hi and hi - lo > 0.1


@pytest.mark.parametrize("n,effect,sd", [(3, 0.1, 0.1), (8, 0.1, 0.1), (10, 0.13, 0.0998), (25, 0.05, 0.1)])
def test_power_matches_noncentral_t(n, effect, sd):
    # catches the shifted-central-t shortcut (off by ~0.02 at small n) and a one-sided critical value
    c = stats.t.ppf(0.975, n - 1)
    ncp = effect * math.sqrt(n) / sd
    ref = stats.nct.sf(c, n - 1, ncp) + stats.nct.cdf(-c, n - 1, ncp)
    assert P.paired_t_power(n, effect, sd) == pytest.approx(ref, abs=2e-4)


def test_sample_size_is_the_smallest_n_reaching_power():
    # catches returning the first n past the target by the normal approximation (7.8 -> 8 instead of 10)
    n = P.paired_sample_size(0.10, 0.0998)
    assert n == 10
    c = stats.t.ppf(0.975, n - 2)
    ncp = 0.10 * math.sqrt(n - 1) / 0.0998
    assert stats.nct.sf(c, n - 2, ncp) + stats.nct.cdf(-c, n - 2, ncp) < 0.8
    with pytest.raises(ValueError, match="nonzero"):
        P.paired_sample_size(0.0, 0.1)


def test_holm_hand_worked():
    # m = 3, alpha 0.05: sorted p 0.01, 0.03, 0.04 -> adjusted 0.03, 0.06, 0.06; only the first rejected.
    # Bonferroni would give 0.03, 0.09, 0.12; stopping too late would reject 0.03 (0.03 > 0.05/2 = 0.025).
    out = P.holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert [out[k]["p_adjusted"] for k in "acb"] == pytest.approx([0.03, 0.06, 0.06])
    assert [out[k]["reject"] for k in "acb"] == [True, False, False]


def test_compare_orients_method_minus_reference():
    # catches reference - method (the sign of every conclusion would flip) and ties counted as a side
    cmp = P.compare({0: (0.5, 0.6), 1: (0.7, 0.7), 2: (0.4, 0.3), 3: (0.2, 0.5)}, "sapo", "grpo")
    assert cmp.differences == pytest.approx([-0.1, 0.0, 0.1, -0.3])
    assert (cmp.below, cmp.above, cmp.ties) == (2, 1, 1)
    with pytest.raises(ValueError, match="at least 2"):
        P.compare({0: (0.5, 0.6)})
    with pytest.raises(ValueError, match="finite"):
        P.t_interval([0.1, float("nan")])


def _run(tmp_path, name, rows):
    d = tmp_path / name
    d.mkdir()
    with open(d / "metrics.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return d


def test_trajectory_key_ignores_timings_only(tmp_path):
    # a copy of a run in another study differs only in timings: same key; any trained quantity differs: new key
    rows = [{"step": 1, "losses/loss": 0.25, "optim/grad_norm": 1.5,
             "time/elapsed_s": 3.0, "time/step_s": 1.0, "time/dev_eval_s": 0.2}]
    a = _run(tmp_path, "a", rows)
    b = _run(tmp_path, "b", [{**rows[0], "time/elapsed_s": 9.0, "time/step_s": 2.0, "time/dev_eval_s": 0.7}])
    c = _run(tmp_path, "c", [{**rows[0], "losses/loss": 0.2500001}])
    assert P.trajectory_key(a) == P.trajectory_key(b) != P.trajectory_key(c)
    kept, dropped = P.distinct([a, b, c], P.trajectory_key)
    assert kept == [a, c] and dropped == [(a, b)]
