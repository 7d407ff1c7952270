"""The tasks' documented limits, each on its bound and a step to each side, with the bound typed here from the
docstrings and counted by hand: addition's 90% of the distinct pairs, the digit-string families' half of the
shortest level, scratchpad's width <= 6, the carry-dropped fraction in [0, 1]."""

import pytest

from sapo_lab.tasks.addition import make_splits
from sapo_lab.tasks.suite import CarryDroppedColdStart, DigitSort, Reversal, ScratchpadAddition


# One-digit operands are 0..9, so 10 x 10 = 100 ordered pairs (0 counts: a one-digit operand starts at 0, not 1);
# the request may use at most 90% of them: 90 is allowed, 91 is not.
@pytest.mark.parametrize(("total", "allowed"), [(80, True), (89, True), (90, True), (91, False)])
def test_addition_may_ask_for_at_most_ninety_percent_of_its_pairs(total, allowed):
    """Catches ``>=`` at the 90% bound (90 of 100 refused) and the one-digit range counted from 1 (81 pairs,
    so 80 refused)."""
    if allowed:
        splits = make_splits(seed=3, min_digits=1, max_digits=1, num_train=total - 2, num_dev=1, num_eval=1)
        assert sum(len(s) for s in splits.values()) == total
    else:
        with pytest.raises(ValueError) as refused:
            make_splits(seed=3, min_digits=1, max_digits=1, num_train=total - 2, num_dev=1, num_eval=1)
        assert str(refused.value) == f"{total} problems requested but only 100 distinct pairs exist; use more digits"


# Lengths 1 and 2 are two levels; length 1 has 10 strings, and a level may take at most half of them: 5 a level,
# so 10 problems in all are allowed and 11 (5.5 a level) are not.
@pytest.mark.parametrize("family", [DigitSort, Reversal])
@pytest.mark.parametrize(("total", "allowed"), [(10, True), (11, False)])
def test_a_digit_string_level_may_take_half_of_its_shortest_strings(family, total, allowed):
    """Catches ``>=`` at the half-of-the-shortest-level bound (exactly 5 a level refused)."""
    task = family(min_length=1, max_length=2)
    if allowed:
        assert sum(len(s) for s in task.make_splits(0, total - 2, 1, 1).values()) == total
    else:
        with pytest.raises(ValueError, match="length 1 has only 10 strings; raise min_length"):
            task.make_splits(0, total - 2, 1, 1)


def test_scratchpad_width_six_is_allowed_and_seven_is_not():
    """Catches ``<`` for ``<=`` at the documented width bound (6) and the bound moved to 7."""
    assert ScratchpadAddition(width=6).problem(999999, 1).answer.endswith("=0000001")  # 1,000,000 reversed
    with pytest.raises(ValueError, match=r"^width must be in \[1, 6\], got 7$"):
        ScratchpadAddition(width=7)
    with pytest.raises(ValueError, match=r"^width must be in \[1, 6\], got 0$"):
        ScratchpadAddition(width=0)


@pytest.mark.parametrize(("fraction", "allowed"), [(0.0, True), (1.0, True), (1.01, False), (-0.01, False)])
def test_the_carry_dropped_fraction_is_a_closed_unit_interval(fraction, allowed):
    """Catches an open end at 1 (every carry dropped, the documented extreme, refused) or at 0."""
    if allowed:
        assert CarryDroppedColdStart(corrupt_fraction=fraction).corrupt_fraction == fraction
    else:
        with pytest.raises(ValueError, match=rf"^corrupt_fraction must be in \[0, 1\], got {fraction}$"):
            CarryDroppedColdStart(corrupt_fraction=fraction)
