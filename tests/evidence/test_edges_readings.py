"""The words a reader sees in the decision table, read at the edges: each side of zero, an interval that
touches zero, a slope row, and the formatting of the numbers beside them.

Every expected word is decided here from the interval given to the row (a literal interval, so its side is
plain to see), never by asking ``side_of_zero`` or ``reading`` what it would say.
"""

from dataclasses import dataclass

import pytest

from sapo_lab.evidence.confirmatory import interval_text, rate_text
from sapo_lab.evidence.decision import Row, reading
from sapo_lab.evidence.gate_map import side_of_zero


@dataclass(frozen=True)
class Interval:
    """The two fields a reading looks at: the mean and the 95% t interval (no statistics behind them)."""

    mean: float
    t_interval: tuple[float, float]


BELOW = Interval(-0.044, (-0.069, -0.018))
ABOVE = Interval(0.021, (0.004, 0.038))
ACROSS = Interval(-0.010, (-0.025, 0.005))


def _row(comparison, *, kind="gap", declared=True, family=None, reject=None):
    return Row(id="X", study="gate_map", task="addition", tau_pos=1.0, staleness=(2, 4, 8, 16), rates=(2e-4, 2e-4),
               rate_rule="shared", checkpoint="final", comparison=comparison, declared=declared, kind=kind,
               family=family, reject=reject)


@pytest.mark.parametrize("declared", [True, False])
def test_a_slope_row_says_falls_below_zero_and_rises_above_it(declared):
    # catches: the slope's words swapped ("rises" for a gap that shrinks as M grows, i.e. a negative slope),
    # a slope row read with the gap's words ("below zero" per doubling), and a slope holding zero called a trend
    falling = reading(_row(BELOW, kind="slope", declared=declared, reject=True))
    rising = reading(_row(ABOVE, kind="slope", declared=declared, reject=True))
    flat = reading(_row(ACROSS, kind="slope", declared=declared, reject=False))
    assert "falls" in falling and "rises" not in falling and "zero" not in falling, falling
    assert "rises" in rising and "falls" not in rising and "zero" not in rising, rising
    assert "no trend" in flat and "rises" not in flat and "falls" not in flat, flat
    prefix = "declared: " if declared else "exploratory: "
    assert all(text.startswith(prefix) for text in (falling, rising, flat))


def test_a_gap_row_says_which_side_of_zero_its_interval_lies_on():
    # catches: the gap's words swapped, and a gap row read with the slope's words
    assert reading(_row(BELOW, declared=False)) == "exploratory: below zero"
    assert reading(_row(ABOVE, declared=False)) == "exploratory: above zero"
    assert reading(_row(ACROSS, declared=False)) == "exploratory: holds zero"


@pytest.mark.parametrize(("interval", "side"), [
    ((0.0, 0.03), 0),      # the lower end exactly at zero: the interval still holds zero
    ((1e-12, 0.03), 1),    # a hair above zero: above
    ((-0.03, 0.0), 0),     # the upper end exactly at zero: holds zero
    ((-0.03, -1e-12), -1),  # a hair below: below
])
def test_an_interval_that_touches_zero_holds_it(interval, side):
    # catches: `lo >= 0` / `hi <= 0` in side_of_zero, which would call an interval ending at zero a difference
    assert side_of_zero(Interval(0.01 * side, interval)) == side
    words = {1: "above zero", -1: "below zero", 0: "holds zero"}
    assert reading(_row(Interval(0.01 * side, interval), declared=False)) == f"exploratory: {words[side]}"


def test_a_declared_difference_says_whether_it_reached_the_level():
    # catches: the declared level claimed for an answer whose adjustment did not keep it, and the qualifier
    # of a family member given to a lone question (which has no Holm adjustment to lose its side to)
    assert reading(_row(BELOW, reject=True)) == "declared: below zero, at the declared level"
    assert reading(_row(BELOW, family="staleness", reject=False)) == "declared: below zero before adjustment, not after"
    assert reading(_row(BELOW, reject=False)) == "declared: below zero, not at the declared level"
    assert reading(_row(ACROSS, family="staleness", reject=False)) == "declared: holds zero"


@pytest.mark.parametrize(("mean", "interval", "text"), [
    (-0.075, (-0.124, -0.026), "\u22120.075 [\u22120.124, \u22120.026]"),
    (0.0104, (-0.0016, 0.0224), "+0.010 [\u22120.002, +0.022]"),
    (0.0, (-0.5, 0.5), "+0.000 [\u22120.500, +0.500]"),
])
def test_an_interval_is_written_with_signs_and_true_minus_signs(mean, interval, text):
    # the texts typed here: catches the ASCII hyphen left in (the book's tables use U+2212), a positive mean
    # written without its '+', and the interval's ends swapped or rounded to two places
    assert interval_text(Interval(mean, interval)) == text


@pytest.mark.parametrize(("rate", "text"), [(2e-4, "2e-4"), (1e-4, "1e-4"), (5e-5, "5e-5"), (1.5e-4, "1.5e-4"),
                                            (1e-3, "1e-3"), (3e-5, "3e-5")])
def test_a_learning_rate_is_written_as_the_declarations_write_it(rate, text):
    # catches: the exponent rounded instead of floored (5e-5 would read "0.5e-4"), and %g's own "0.0002"
    assert rate_text(rate) == text
