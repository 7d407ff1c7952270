"""The words of an exercise check's verdict, each built from inputs typed here: how many inputs failed out of
how many, which input is shown, the singular and plural of a stored-value stub, a negative zero, the nan hint,
and a known mistake that sits close to the right answer. Each test names the mistake it catches."""

from __future__ import annotations

import pytest
import torch

from sapo_lab.course.checks import CheckFailed, Exercise, answered, run_check
from sapo_lab.course.mistakes import Mistake, describe_difference


def double(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def square_exercise(cases, mistakes=(), **options) -> Exercise:
    return Exercise(id="00.square", function="square", reference=lambda x: x * x, cases=lambda: cases,
                    mistakes=mistakes, **options)


def failure(ex: Exercise, fn) -> list[str]:
    with pytest.raises(CheckFailed) as err:
        run_check(ex, fn)
    return str(err.value).splitlines()


def test_the_message_counts_failures_of_all_inputs_and_shows_the_smallest_failing_one():
    """catches: "2 of 3" printed as "3 of 2", or the largest failing input shown instead of the smallest. Three
    inputs of 3, 1 and 2 numbers; the answer adds 1 except on the 2-number input, so inputs 1 and 2 fail and
    the smallest of them is x = [2]: got 2 * 2 + 1 = 5, expected 4."""
    cases = [dict(x=double(1.0, 2.0, 3.0)), dict(x=double(2.0)), dict(x=double(4.0, 5.0))]
    lines = failure(square_exercise(cases), lambda x: x * x + (0.0 if x.numel() == 2 else 1.0))
    assert lines[0] == "square is not right yet: it differs from the reference on 2 of 3 fresh inputs."
    assert lines[1:4] == ["  input:    x=[2]", "  got:      [5]", "  expected: [4]"]


def test_a_right_answer_says_how_many_inputs_it_agreed_on(capsys):
    """catches: the count of inputs in the passing line taken from something else than the cases run (3 here)."""
    cases = [dict(x=double(1.0)), dict(x=double(2.0, 3.0)), dict(x=double(-1.5))]
    assert run_check(square_exercise(cases), lambda x: x ** 2)
    assert capsys.readouterr().out == "correct: square agrees with the reference on 3 fresh inputs.\n"


def test_a_stub_of_one_stored_value_says_is_and_of_two_says_are(capsys):
    """catches: the verb's number inverted ("worst still are", "worst, best still is")."""
    assert answered(worst=...) is False
    assert capsys.readouterr().out.startswith("not done yet: worst still is `...`.")
    assert answered(worst=..., best=..., done=1.0) is False
    assert capsys.readouterr().out.startswith("not done yet: worst, best still are `...`.")


def test_a_negative_zero_is_shown_as_0():
    """catches: the "+ 0.0" dropped from the rendering, so -0.0 prints as "-0" in the got row. The answer
    -x^2 on x = [0, 1] is [-0.0, -1.0]."""
    lines = failure(square_exercise([dict(x=double(0.0, 1.0))]), lambda x: -(x * x))
    assert lines[2] == "  got:      [0, -1]"


def test_the_nan_hint_is_given_only_where_the_reference_is_finite():
    """catches: the nan hint given wherever the answer has a nan, also where the reference has the same nan.
    On x = [nan, 1] the reference is [nan, 1]; x^2 + 1 keeps that nan and is wrong only at [1] (2 for 1)."""
    with_nan = square_exercise([dict(x=double(float("nan"), 1.0))])
    text = "\n".join(failure(with_nan, lambda x: x * x + 1))
    assert "nan or inf" not in text
    assert text.endswith("  What differs: 1 of 2 elements differ; largest difference at [1]: got 2, expected 1.")
    finite = square_exercise([dict(x=double(0.0, 1.0))])
    assert "it returned nan or inf where the right answer is finite" in "\n".join(
        failure(finite, lambda x: x * x / x))


def test_a_nan_shared_with_the_reference_is_not_counted_as_a_difference():
    """catches: describe_difference comparing without equal_nan, so a nan the reference has too is called the
    largest difference ("2 of 2 elements differ; largest difference at [0]: got nan, expected nan"). Here only
    element [2] differs: 5 for 3."""
    got, want = double(float("nan"), 1.0, 5.0), double(float("nan"), 1.0, 3.0)
    assert describe_difference(got, want) == "1 of 3 elements differ; largest difference at [2]: got 5, expected 3"


def test_a_mistake_close_to_the_answer_is_named_when_the_answer_matches_it_to_float32():
    """catches: a mistake judged distinguishable from the reference at float32's tolerance (2e-5) instead of
    the exercise's own (1e-6). The mistake is x^2 (1 + 1.5e-5): 1.5e-5 from the reference, beyond 1e-6 and within
    2e-5; the answer x^2 (1 + 3e-5) is beyond 2e-5 from the reference (it fails) and within it of the mistake."""
    mistake = Mistake("a factor 1 + 1.5e-5", "drop the factor", lambda x: x * x * (1 + 1.5e-5))
    ex = square_exercise([dict(x=double(1.0, 2.0))], mistakes=(mistake,))
    lines = failure(ex, lambda x: x * x * (1 + 3e-5))
    assert "  Known mistake: a factor 1 + 1.5e-5." in lines
