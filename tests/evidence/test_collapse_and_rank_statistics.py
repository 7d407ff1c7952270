"""Collapse timing, within-group rank correlation and split overlap (sapo_lab.evidence.analysis), for chapter 14."""

import itertools
from types import SimpleNamespace

import pytest
from scipy import stats

from sapo_lab.evidence.analysis import flag_time, split_overlap
from sapo_lab.evidence.paired import survival_table, within_group_spearman
from sapo_lab.tasks import Problem, make_task


def test_survival_table_hand_worked_with_censoring():
    # Five runs: flags at 2, 5, 5; censored at 3 and 8. At 2: 5 at risk, 1 flag -> 4/5.
    # At 5: 3 at risk (5, 5, 8), 2 flags -> 4/5 * 1/3. Catches censored runs counted as flags
    # (survival 2/5 at 3), or censored runs kept at risk after they left (4/5 * 2/4 at 5).
    events = [(2, True), (3, False), (5, True), (5, True), (8, False)]
    rows = {r["step"]: r for r in survival_table(events, [1, 2, 4, 5, 8])}
    assert rows[1]["survival"] == 1.0 and rows[1]["at_risk"] == 5
    assert rows[2]["survival"] == pytest.approx(0.8)
    assert rows[4]["survival"] == pytest.approx(0.8) and rows[4]["at_risk"] == 3
    assert rows[5]["survival"] == pytest.approx(0.8 / 3) and rows[5]["flagged"] == 3
    assert rows[8]["survival"] == pytest.approx(0.8 / 3) and rows[8]["at_risk"] == 1


def test_survival_without_censoring_is_the_share_not_yet_flagged():
    # With every run observed to the end (censored only at the last step), Kaplan-Meier reduces to
    # the plain share; catches an off-by-one that drops the runs flagged exactly at the step.
    events = [(10, True), (20, True), (20, True), (100, False), (100, False), (40, True)]
    for row in survival_table(events, [5, 10, 20, 39, 40, 100]):
        plain = sum(not (f and s <= row["step"]) for s, f in events) / len(events)
        assert row["survival"] == pytest.approx(plain)


def test_survival_table_refuses_nothing():
    # catches a silent 1.0 (or a ZeroDivisionError) for an empty study
    with pytest.raises(ValueError, match="at least one run"):
        survival_table([], [10])


def test_flag_time_reads_the_declared_verdict():
    # catches the flag step returned for an unflagged run (a stale "step" field) or the last step for a flagged one
    flagged = SimpleNamespace(record={"steps": 100, "collapse": {"collapsed": True, "step": 35}})
    quiet = SimpleNamespace(record={"steps": 50, "collapse": {"collapsed": False, "step": None}})
    assert flag_time(flagged) == (35, True) and flag_time(quiet) == (50, False)


def test_spearman_in_one_group_matches_scipy_rho_and_exact_permutation_p():
    # one group: centring changes nothing, so rho is scipy's and p is scipy's exact pairings test;
    # catches ranks without tie handling, and a one-sided p
    x = [0.3, 1.2, 0.7, 2.5, 1.9, 0.1]
    y = [1.0, 0.4, 2.0, 3.0, 3.0, 0.2]
    rho, p = within_group_spearman(x, y, [0] * 6)
    assert rho == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    # one sample, "pairings": every reordering of x against the fixed y, enumerated (6! = 720)
    ref = stats.permutation_test((x,), lambda a: stats.spearmanr(a, y).statistic,
                                 permutation_type="pairings", n_resamples=float("inf"))
    assert p == pytest.approx(ref.pvalue, abs=1e-9)


def test_spearman_centres_on_groups_and_permutes_only_within_them():
    # Two seeds with a large shared shift: pooled, the shift alone makes rho near 1; centred it does
    # not. Catches a missing centring, and permutations that mix the groups (more than 3! * 3!).
    x = [1.0, 2.0, 3.0, 11.0, 12.0, 13.0]
    y = [0.3, 0.1, 0.2, 10.1, 10.3, 10.2]
    groups = ["a", "a", "a", "b", "b", "b"]
    rho, p = within_group_spearman(x, y, groups)
    cx = [v - m for v, m in zip(x, [2, 2, 2, 12, 12, 12], strict=True)]
    cy = [v - m for v, m in zip(y, [0.2, 0.2, 0.2, 10.2, 10.2, 10.2], strict=True)]
    assert rho == pytest.approx(stats.spearmanr(cx, cy).statistic, abs=1e-12)
    assert stats.spearmanr(x, y).statistic > 0.7 and abs(rho) < 0.3
    null = []
    for pa in itertools.permutations(range(3)):
        for pb in itertools.permutations(range(3, 6)):
            order = list(pa) + list(pb)
            null.append(stats.spearmanr(cx, [cy[j] for j in order]).statistic)
    assert p == pytest.approx(sum(abs(v) >= abs(rho) - 1e-12 for v in null) / 36)


def test_spearman_refuses_bad_input():
    # catches a silent NaN for constant data and a silent zip over lists of different lengths
    with pytest.raises(ValueError, match="not all equal"):
        within_group_spearman([1, 1, 1], [1, 2, 3], [0, 0, 0])
    with pytest.raises(ValueError, match="one entry per run"):
        within_group_spearman([1, 2, 3], [1, 2], [0, 0, 0])


def test_split_overlap_counts_exact_commuted_and_answer_matches():
    # hand-built splits; catches a twin check that counts a+a (its own twin), or compares the whole
    # scratchpad answer instead of the final sum
    def p(prompt, answer):
        return Problem(prompt, answer, 0)

    splits = {"train": [p("12+34=", "64"), p("5+5=", "01"), p("1+2:", "t=3")],
              "dev": [p("9+9=", "81")],
              "eval": [p("34+12=", "64"), p("5+5=", "01"), p("7+1=", "80"), p("2+1:", "u=3"), p("s123=", "321")]}
    assert split_overlap(splits) == {"eval": 5, "exact": 1, "additions": 3, "commuted": 2, "answer": 3}


def test_split_overlap_of_the_real_addition_task_is_mostly_commuted_twins():
    # on two-digit addition 8768 of the 10000 operand pairs are drawn, so most eval prompts' twins are
    # in train (a contamination a prompt-level check misses); catches splits that are not disjoint
    splits = make_task("addition").make_splits(0, 8000, 256, 512)
    out = split_overlap(splits)
    assert out["exact"] == 0 and out["commuted"] > 0.7 * out["additions"]
