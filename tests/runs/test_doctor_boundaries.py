"""The doctor's thresholds read exactly at each boundary and on both sides of it, and the words it prints.

Each log is built here as the doctor's series (no run, no file), so a value sits exactly on a threshold. The
boundary values are typed here with the rule the module docstring states (on-policy while max |log r| <= 1e-4;
inert while the median share removed < 1%; zero-spread groups dominate above one half; collapse under 0.1 x the
first quarter's entropy or 0.5 x the best quarter's reward), not read from ``THRESHOLDS``.
"""

import pytest

from sapo_lab.runs.doctor import SERIES, RunLog, Thresholds, diagnose, report


def _log(steps=4, **series):
    """A log of ``steps`` steps: every series absent (None) unless given, a list or one value for every step."""
    full = {name: [None] * steps for name in SERIES}
    for name, values in series.items():
        full[name] = list(values) if isinstance(values, (list, tuple)) else [values] * steps
    return RunLog(path="planted", kind="sapo_lab", steps=list(range(1, steps + 1)), series=full)


def _regime(max_log, removed=0.05):
    return diagnose(_log(max_abs_log_ratio=max_log, signal_removed=removed)).regime


@pytest.mark.parametrize(("max_log", "regime"), [(9.99e-5, "on-policy"), (1e-4, "on-policy"), (1.01e-4, "gate active")])
def test_on_policy_holds_up_to_and_at_its_bound(max_log, regime):
    # catches: the on-policy bound made strict (`<` instead of `<=`: a run whose largest |log r| is exactly the
    # bound would be read as gate active), and the bound moved off 1e-4 in either direction
    assert _regime(max_log) == regime


@pytest.mark.parametrize(("removed", "regime"), [(0.0099, "gate inert"), (0.01, "gate active"), (0.0101, "gate active")])
def test_the_gate_is_inert_only_below_one_percent(removed, regime):
    # catches: `<=` for the inert share (a median of exactly 1% is active: "inert while under 1%"), and the share
    # moved off 1%
    assert _regime(0.1, removed) == regime


@pytest.mark.parametrize(("zero", "dominates"), [(0.49, False), (0.5, False), (0.51, True)])
def test_zero_spread_groups_dominate_only_above_half(zero, dominates):
    # catches: `>=` for the dominating share (exactly half the groups do not dominate), and its words: the
    # verdict line and the finding say "dominate" only when they do
    log = _log(max_abs_log_ratio=0.1, signal_removed=0.05, zero_spread=zero)
    reading = diagnose(log)
    assert reading.zero_spread_dominates is dominates
    words = "groups with zero reward spread dominate"
    assert (words in reading.verdict) is dominates
    assert any("(<= 50%: they do not dominate)" in line for line in reading.lines) is (not dominates)


def _signs(entropy=(1.0, 1.0, 1.0, 1.0), reward=(0.5, 0.5, 0.5, 0.5)):
    log = _log(steps=len(entropy), max_abs_log_ratio=0.1, signal_removed=0.05, entropy=entropy, reward=reward)
    return [s.split()[0] for s in diagnose(log).collapse_signs]


@pytest.mark.parametrize(("last", "signs"), [(0.09, ["entropy"]), (0.1, []), (0.11, [])])
def test_entropy_collapse_is_strictly_under_a_tenth_of_the_first_quarter(last, signs):
    # four steps: a quarter is one step, so the first quarter's entropy is 1.0 and the last quarter's `last`.
    # Catches: `<=` (a last quarter at exactly a tenth of the first is not collapse), the fraction moved off 0.1
    assert _signs(entropy=(1.0, 1.0, 1.0, last)) == signs


@pytest.mark.parametrize(("last", "signs"), [(0.39, ["reward"]), (0.4, []), (0.41, [])])
def test_reward_collapse_is_strictly_under_half_the_best_quarter(last, signs):
    # the best quarter is 0.8 (not the first, 0.2), so half of it is 0.4 exactly.
    # Catches: `<=` (exactly half the best is not collapse), the first quarter taken for the best
    assert _signs(reward=(0.2, 0.8, 0.8, last)) == signs


def test_two_steps_are_enough_to_read_a_collapse_and_one_is_not():
    # the shortest series with a first and a last quarter is two steps. Catches: `> 2` or `>= 3` for the series
    # length (a two-step log's collapse missed), and a one-step log compared with itself
    assert _signs(entropy=(1.0, 0.05), reward=(0.8, 0.1)) == ["entropy", "reward"]
    assert _signs(entropy=(1.0,), reward=(0.8,)) == []


@pytest.mark.parametrize(("removed", "text"), [(0.0099, "0.99%"), (0.01, "1.0%"), (0.125, "12.5%")])
def test_a_share_under_one_percent_gets_two_decimals(removed, text):
    # the share as printed, typed here: catches `<=` in the percent format (1% would print "1.00%") and a share
    # printed as a fraction
    reading = diagnose(_log(max_abs_log_ratio=0.1, signal_removed=removed))
    assert f"removed a median {text} of the importance-weighted signal" in reading.lines[0]


def test_the_verdict_line_lists_the_regime_then_each_finding():
    # catches: a finding left out of the verdict line, or the regime not first
    log = _log(max_abs_log_ratio=0.1, signal_removed=0.05, zero_spread=0.9, entropy=(1.0, 1.0, 1.0, 0.01))
    assert report(log, diagnose(log))[0] == ("verdict: gate active; groups with zero reward spread dominate; "
                                             "signs of collapse")
    quiet = _log(max_abs_log_ratio=0.1, signal_removed=0.002, zero_spread=0.1)
    assert report(quiet, diagnose(quiet))[0] == "verdict: gate inert"


def test_the_thresholds_line_states_each_bound_with_its_comparison():
    # the line a reader checks a run against, typed here: catches a bound printed with the wrong comparison
    # (on-policy "<" while the code reads "<="), or a percentage printed as a fraction
    assert Thresholds().line() == (
        "thresholds: on-policy max |log r| <= 0.0001; inert median signal removed < 1%; zero-spread groups dominate "
        "above 50%; collapse: last-quarter entropy < 0.1 x first quarter's, or reward < 0.5 x best quarter's, or a "
        "non-finite value")
