"""The task layer's input bounds, tried on the bound itself: an operand of exactly 10**width, and digits that are
digits to ``str.isdigit`` but not ASCII."""

import pytest

from sapo_lab.tasks.addition import make_problem
from sapo_lab.tasks.base import digit_verdict


def test_an_operand_of_width_digits_is_accepted_and_one_of_width_plus_one_refused():
    """Catches the operand bound written ``> 10**width``: 100 has three digits, so at width 2 it is refused
    (the prompt would otherwise read "100+00=", one digit wider than every other prompt)."""
    problem = make_problem(99, 5, 2)
    assert problem.prompt == "99+05="
    assert problem.answer == "401"  # 99 + 5 = 104, padded to width + 1 = 3 digits, reversed
    for a, b in ((100, 0), (0, 100)):
        with pytest.raises(ValueError, match=r"\[0, 10\*\*2\)"):
            make_problem(a, b, 2)


@pytest.mark.parametrize("answer", ["\u0661\u0662", "\uff11\uff12", "1\u00b2"])
def test_digits_outside_ascii_are_invalid_not_wrong(answer):
    """Catches the ASCII test dropped from the verifier: Arabic-Indic, full-width and superscript digits pass
    ``str.isdigit``, so without it they are graded "wrong" (a formatting failure counted as an arithmetic one)."""
    assert answer.isdigit() and not answer.isascii()
    assert digit_verdict(answer, True, "12") == (0.0, "invalid")
    assert digit_verdict("12", True, "12") == (1.0, "correct")
    assert digit_verdict("13", True, "12") == (0.0, "wrong")
