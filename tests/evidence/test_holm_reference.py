"""Holm's adjustment, the paired t-test's degenerate case and the declared families, against independent values.

The references are a hand-worked case (written out below), statsmodels' ``multipletests`` (a separate
implementation; test-only) and the definition of the t statistic. Nothing expected here is read from
``sapo_lab.studies``.
"""

import random

import pytest
from scipy import stats

from sapo_lab.evidence import paired as P
from sapo_lab.evidence.analysis import adjust_families
from sapo_lab.evidence.contrasts import check_contrasts, trend_slopes


def _reference(p_values: dict, alpha: float) -> dict:
    multitest = pytest.importorskip("statsmodels.stats.multitest", reason="statsmodels (test-only) is not installed")
    names = list(p_values)
    reject, adjusted, _, _ = multitest.multipletests([p_values[n] for n in names], alpha=alpha, method="holm")
    return {n: (float(a), bool(r)) for n, a, r in zip(names, adjusted, reject, strict=True)}


def test_holm_steps_down_where_bonferroni_stops():
    # m = 3, alpha 0.05; sorted p 0.01, 0.02, 0.04 against Holm's thresholds 0.05/3, 0.05/2, 0.05/1: all three
    # rejected. Bonferroni's single threshold 0.05/3 = 0.0167 would keep only the first (catches a / m in place of
    # a / (m - i)). Adjusted: 3 * 0.01 = 0.03, max(0.03, 2 * 0.02) = 0.04, max(0.04, 1 * 0.04) = 0.04.
    out = P.holm({"a": 0.01, "b": 0.02, "c": 0.04})
    assert [out[k]["p_adjusted"] for k in "abc"] == pytest.approx([0.03, 0.04, 0.04])
    assert [out[k]["reject"] for k in "abc"] == [True, True, True]


@pytest.mark.parametrize(("second", "rejected"), [(0.025, True), (0.0251, False)])
def test_holm_threshold_is_bracketed_at_alpha_over_the_rank(second, rejected):
    # the second-smallest of 3 p-values meets alpha / 2 = 0.025: at it, rejected (the rule is p <= threshold);
    # just above it, not, and the step-down stops there, so the largest (0.03 < 0.05) is not rejected either
    out = P.holm({"a": 0.001, "b": second, "c": 0.03})
    assert [out[k]["reject"] for k in "abc"] == [True, rejected, rejected]


def test_holm_adjusted_p_never_exceeds_one():
    # 2 * 0.6 = 1.2 is a multiplier's product, not a probability: adjusted p is capped at 1
    out = P.holm({"a": 0.6, "b": 0.7, "c": 0.9})
    assert [out[k]["p_adjusted"] for k in "abc"] == [1.0, 1.0, 1.0]
    assert not any(out[k]["reject"] for k in "abc")


def test_holm_adjusted_p_is_monotone_in_the_raw_p():
    # catches the running maximum dropped: 3 * 0.02 = 0.06 but 2 * 0.025 = 0.05 would then rank below it
    out = P.holm({"a": 0.02, "b": 0.025, "c": 0.5})
    assert out["b"]["p_adjusted"] == pytest.approx(0.06)


@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_holm_matches_statsmodels_on_random_families(alpha, monkeypatch):
    # families of 1 to 8 p-values, a mix of small ones (near the thresholds) and uniform ones, with ties.
    # multipletests runs gc.collect() on every call: a whole-heap pass, ~0.1 s in a process holding torch
    monkeypatch.setattr("gc.collect", lambda *_: 0)
    rng = random.Random(20260)
    for _ in range(200):
        m = rng.randint(1, 8)
        p = [rng.choice([rng.uniform(0, 0.06), rng.random(), 10 ** rng.uniform(-6, -1)]) for _ in range(m)]
        if m > 2 and rng.random() < 0.2:
            p[1] = p[0]   # a tie
        p_values = {f"q{i}": v for i, v in enumerate(p)}
        ours = P.holm(p_values, alpha)
        for name, (adjusted, reject) in _reference(p_values, alpha).items():
            assert ours[name]["p"] == p_values[name]
            assert ours[name]["p_adjusted"] == pytest.approx(adjusted, rel=1e-12, abs=0), (p_values, name)
            assert ours[name]["reject"] is reject, (p_values, name)


def test_a_paired_t_test_with_no_spread_and_a_nonzero_mean_has_p_zero():
    # every pair differs by exactly -0.125 (a binary fraction: the SD is exactly 0): t = mean / 0 is infinite,
    # so p = 0; p = 1 would call the most consistent gap possible "no evidence" (catches the zero-SD branch
    # returning 1 whatever the mean). The limit from scipy: a spread of 1e-9 already gives p < 1e-6.
    assert P.paired_t_test([-0.125] * 4) == 0.0
    assert P.paired_t_test([0.25] * 3) == 0.0
    assert stats.ttest_1samp([-0.125, -0.125, -0.125, -0.125 + 1e-9], 0.0).pvalue < 1e-6
    assert P.compare({s: (0.5, 0.625) for s in range(4)}).t_p == 0.0
    # no spread and no mean: nothing to see, p = 1
    assert P.paired_t_test([0.0] * 4) == 1.0


def test_paired_t_test_matches_scipy_at_small_spread():
    diffs = [-0.125, -0.125, -0.125, -0.124]
    assert P.paired_t_test(diffs) == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue, rel=1e-9)


def _entry(test_id, p, family=None):
    return {"id": test_id, "p": p, **({"family": family} if family else {})}


def test_declared_families_are_adjusted_each_on_its_own_and_lone_tests_keep_their_raw_p():
    # two families and a lone test: each family's Holm runs over its own members only (catches one Holm over
    # every declared test, which divides alpha among 5 instead of 2); the lone test is read at alpha
    results = [_entry("A1", 0.02, "F"), _entry("A2", 0.03, "F"), _entry("B1", 0.001, "G"), _entry("B2", 0.2, "G"),
               _entry("L", 0.04)]
    adjust_families(results, 0.05)
    # F: 2 * 0.02 = 0.04, max(0.04, 1 * 0.03) = 0.04, both kept (0.02 <= 0.05/2, 0.03 <= 0.05);
    # G: 2 * 0.001 = 0.002 kept, max(0.002, 0.2) = 0.2 not. Over all five, 0.02 > 0.05/4 would keep nothing in F.
    assert [r["p_adjusted"] for r in results[:4]] == pytest.approx([0.04, 0.04, 0.002, 0.2])
    assert [r["reject"] for r in results[:4]] == [True, True, True, False]
    assert results[4]["p_adjusted"] == 0.04 and results[4]["reject"] is True


def test_a_family_with_a_pending_member_is_not_adjusted_over_its_finished_part():
    # Holm over two finished members of a declared three would use m = 2: 0.02 <= 0.025 would reject
    results = [_entry("A1", 0.02, "F"), _entry("A2", 0.021, "F"), _entry("A3", None, "F")]
    adjust_families(results, 0.05)
    for r in results[:2]:
        assert r["p_adjusted"] is None and r["reject"] is None and r["waiting_for"] == ["A3"]
    assert "p_adjusted" not in results[2]


STUDY = {"methods": ["sapo_m2", "grpo_m2", "sapo_m4", "grpo_m4", "sapo_m8", "grpo_m8"],
         "analysis": {"tests": [{"id": "Q1", "method": "sapo_m2", "reference": "grpo_m2", "family": "F"}]}}


def _trend(contrast_id="T1", family=None):
    points = [{"method": f"sapo_m{m}", "reference": f"grpo_m{m}", "x": x} for m, x in ((2, 1), (4, 2), (8, 3))]
    return {"id": contrast_id, "question": "?", "kind": "trend", "test": "paired_t", "points": points,
            **({"family": family} if family else {})}


def test_a_contrast_may_not_join_a_family_of_the_tests_but_may_reuse_a_tests_id_as_a_family_name():
    # catches the family checked against the tests' ids instead of their families: "F" would then pass (and Holm
    # would run twice over one family) while "Q1", a family nobody declared, would be refused
    with pytest.raises(ValueError, match="family 'F' is also a family of 'tests'"):
        check_contrasts([_trend(family="F")], STUDY, {"Q1"})
    check_contrasts([_trend(family="Q1")], STUDY, {"Q1"})


def test_a_contrast_id_may_not_repeat_a_tests_id():
    # catches the taken ids left out: two answers under one id, one overwriting the other by id
    with pytest.raises(ValueError, match="unique: 'Q1' repeats"):
        check_contrasts([_trend("Q1")], STUDY, {"Q1"})


def test_trend_slopes_match_a_least_squares_fit():
    # gaps with a nonzero mean and unequal x spacing: an uncentred or unscaled slope differs from the fit
    xs = [1.0, 2.0, 4.0]
    gaps = {0: [0.10, 0.02, -0.05], 1: [0.3, 0.31, 0.29]}
    import numpy as np

    for seed, slope in trend_slopes(gaps, xs).items():
        assert slope == pytest.approx(np.polyfit(xs, gaps[seed], 1)[0], rel=1e-12)
