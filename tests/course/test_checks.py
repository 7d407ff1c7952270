"""The exercise-check engine (sapo_lab.course.checks) on the answers a student writes.

Each test names the way a check could mislead: rejecting a right answer written another way, passing a wrong one,
naming a mistake the student did not make, or failing with a traceback instead of a lesson.
"""

from __future__ import annotations

import pytest
import torch

from sapo_lab.course.checks import CheckFailed, Exercise, answered, expect, run_check
from sapo_lab.course.mistakes import Mistake, describe_difference


def _square_cases():
    return [dict(x=torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)),
            dict(x=torch.tensor([[0.5, 4.0], [-1.5, 2.0]], dtype=torch.float64))]


SQUARE = Exercise(id="00.square", function="square", reference=lambda x: x * x, cases=_square_cases,
                  mistakes=(Mistake("doubled instead of squared", "multiply x by itself", lambda x: 2 * x),))


def test_a_right_answer_in_another_form_or_float32_passes():
    """Float32 arithmetic passes whether its result is returned in float32 or cast back to float64."""
    assert run_check(SQUARE, lambda x: x ** 2)
    assert run_check(SQUARE, lambda x: torch.exp(2 * torch.log(x.abs())))
    assert run_check(SQUARE, lambda x: (x * x).float())
    assert run_check(SQUARE, lambda x: (x.float() / 3 * x.float() * 3).double())


def test_float32_is_refused_where_the_exercise_needs_double_precision():
    third = [dict(x=torch.tensor([1 / 3], dtype=torch.float64))]  # float32 rounds (1/3)^2 at about 1e-8
    strict = Exercise(**{**SQUARE.__dict__, "float32_ok": False, "rtol": 1e-12, "atol": 0.0, "cases": lambda: third})
    with pytest.raises(CheckFailed):
        run_check(strict, lambda x: (x * x).float())
    with pytest.raises(CheckFailed):
        run_check(strict, lambda x: (x * x).float().double())
    assert run_check(Exercise(**{**strict.__dict__, "float32_ok": True}), lambda x: (x * x).float())


def test_the_stub_says_not_done_yet_and_raises_nothing(capsys):
    def square(x):
        raise NotImplementedError("your code here")
    assert run_check(SQUARE, square) is False
    assert "not done yet" in capsys.readouterr().out


def test_a_known_mistake_is_named_with_its_fix():
    with pytest.raises(CheckFailed) as err:
        run_check(SQUARE, lambda x: 2 * x)
    text = str(err.value)
    assert "Known mistake: doubled instead of squared" in text and "Fix: multiply x by itself" in text
    assert "input:" in text and "got:" in text and "expected:" in text


def test_a_mistake_is_named_only_when_it_explains_every_failing_input():
    """2x on the first input, something else on the second: no known mistake explains both."""
    def half_wrong(x):
        return 2 * x if x.dim() == 1 else x * x + 1
    with pytest.raises(CheckFailed) as err:
        run_check(SQUARE, half_wrong)
    assert "Known mistake" not in str(err.value)
    assert "What differs" in str(err.value)


@pytest.mark.parametrize("answer, words", [
    (lambda x: -(x * x), "the sign is flipped everywhere"),
    (lambda x: 3 * x * x, "every element is 3 times the right one"),
    (lambda x: x * x + 0.5, "every element is shifted by 0.5"),
    (lambda x: (x * x).sum(), "shape"),
    (lambda x: x * x * (1 + 1e-3), "every element is 1.001 times the right one"),
    (lambda x: x * x / (x - x), "nan or inf"),
])
def test_an_unknown_mistake_is_described(answer, words):
    with pytest.raises(CheckFailed) as err:
        run_check(SQUARE, answer)
    assert words in str(err.value)


def test_an_error_in_the_students_code_is_one_message_with_the_input():
    with pytest.raises(CheckFailed) as err:
        run_check(SQUARE, lambda x: x.reshape(7))
    text = str(err.value)
    assert text.startswith("square raised RuntimeError:") and "on the input: x=" in text
    assert err.value.__suppress_context__  # no chained traceback of the student's error


def test_jupyter_shows_the_message_without_a_traceback():
    lines = CheckFailed("first line\nsecond").__class__("first line\nsecond")._render_traceback_()
    assert len(lines) == 2 and "first line" in lines[0] and lines[1] == "second"


def test_a_function_that_changes_its_input_in_place_cannot_change_the_reference():
    """The reference runs first on each input; an in-place student function gets a private copy."""
    def square_in_place(x):
        x.mul_(x)
        return x
    assert run_check(SQUARE, square_in_place)


GRAD = Exercise(id="00.grad", function="loss", reference=lambda a, b: (a.exp() - b.detach()).sum(),
                cases=lambda: [dict(a=torch.tensor([0.1, -0.4], dtype=torch.float64),
                                    b=torch.tensor([1.0, 2.0], dtype=torch.float64))],
                grad_wrt=("a", "b"))


def test_gradients_are_compared_where_the_exercise_asks():
    assert run_check(GRAD, lambda a, b: a.exp().sum() - b.detach().sum())
    with pytest.raises(CheckFailed, match="a gradient reaches b, which should be detached"):
        run_check(GRAD, lambda a, b: (a.exp() - b).sum())
    with pytest.raises(CheckFailed, match="no gradient reaches a"):
        run_check(GRAD, lambda a, b: torch.tensor((a.exp() - b).sum().item()))


def test_stored_values_checks(capsys):
    assert answered(worst=...) is False and "not done yet: worst still is" in capsys.readouterr().out
    assert answered(worst=1.0)
    expect(True, "unused")
    with pytest.raises(CheckFailed, match="the bound fails"):
        expect(False, "the bound fails")


def test_describe_difference_points_at_the_largest_error():
    got = torch.tensor([[1.0, 2.0], [3.0, 9.0]])
    want = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert describe_difference(got, want) == "1 of 4 elements differ; largest difference at [1, 1]: got 9, expected 4"


def test_a_wrong_scalar_is_not_explained_by_a_factor_that_any_number_fits():
    """For one number 'k times the right one' always fits and reads like a scaling slip; say got and expected."""
    loss = Exercise(id="00.loss", function="loss", reference=lambda x: (x * x).sum(), cases=_square_cases)
    with pytest.raises(CheckFailed) as err:
        run_check(loss, lambda x: (x * x).mean())
    assert "times the right one" not in str(err.value) and "largest difference at the value" in str(err.value)


def test_got_and_expected_rows_differ_where_four_digits_read_the_same():
    """A grid search off in the fifth digit (5.586 vs 5.58649) printed two identical rows at 4 significant digits,
    as if the check rejected the very answer it expects; the rows must show the digits where they part."""
    peak = Exercise(id="00.peak", function="peak", reference=lambda x: torch.stack([x + 5.58649, x + 3.59812]),
                    cases=lambda: [dict(x=torch.tensor(0.0, dtype=torch.float64))])
    with pytest.raises(CheckFailed) as err:
        run_check(peak, lambda x: torch.stack([x + 5.586, x + 3.59812]))
    rows = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in str(err.value).splitlines()[2:4]}
    assert rows["got"] != rows["expected"], rows
    assert rows["got"].startswith("[5.586") and rows["expected"].startswith("[5.58649"), rows
    # rows that differ at 4 digits keep the short form
    with pytest.raises(CheckFailed) as err:
        run_check(peak, lambda x: torch.stack([x + 8.33, x + 4.994]))
    assert "got:      [8.33, 4.994]" in str(err.value) and "expected: [5.586, 3.598]" in str(err.value)
