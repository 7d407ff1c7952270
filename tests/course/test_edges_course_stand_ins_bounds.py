"""The stand-in server's request checks at each documented size, on both sides: at most 8 shapes, 4 sizes a
shape, 2**22 numbers in all, texts of 32 characters, and a tensor index inside the request. A request past a
bound is a BadRequest with its one line, never an IndexError."""

from __future__ import annotations

import pytest

from sapo_lab.course.stand_ins import BadRequest, _resolve, _scalar, _shapes


def test_eight_shapes_pass_and_nine_are_refused():
    """catches: the count of shapes bounded with >= (a request of exactly 8 tensors refused)."""
    assert _shapes({"shapes": [[1]] * 8}) == [[1]] * 8
    with pytest.raises(BadRequest, match="^shapes is not a list of at most 8 shapes$"):
        _shapes({"shapes": [[1]] * 9})


def test_a_shape_of_four_sizes_passes_and_five_are_refused():
    """catches: a 4-dimensional tensor refused (>= for > on the dimensions)."""
    assert _shapes({"shapes": [[1, 2, 3, 4]]}) == [[1, 2, 3, 4]]
    with pytest.raises(BadRequest, match="^a shape is not a list of at most 4 sizes$"):
        _shapes({"shapes": [[1, 1, 1, 1, 1]]})


def test_exactly_2_to_the_22_numbers_pass_and_one_more_is_refused():
    """catches: the total bounded with >= (tensors of exactly 4194304 numbers refused). 2**21 + 2**21 is on
    the bound; 2**21 + 2**21 + 1 is one past it."""
    assert _shapes({"shapes": [[2**21], [2**21]]}) == [[2**21], [2**21]]
    with pytest.raises(BadRequest, match="^the tensors hold more than 4194304 numbers$"):
        _shapes({"shapes": [[2**21], [2**21], [1]]})


def test_a_text_of_32_characters_passes_and_33_are_refused():
    """catches: a text argument of exactly 32 characters (an aggregation's name padded) refused."""
    assert _scalar("x" * 32, "an argument") == "x" * 32
    with pytest.raises(BadRequest, match="^an argument is not a number, a short text, True/False or None$"):
        _scalar("x" * 33, "an argument")


def test_a_tensor_index_one_past_the_last_is_a_bad_request():
    """catches: the index bounded with <= (an index equal to the count reaches tensors[i] and raises
    IndexError, not the one-line refusal)."""
    tensors = ["first", "second"]
    assert _resolve({"tensor": 1}, tensors, "values") == "second"
    with pytest.raises(BadRequest, match="^values is an object that names no tensor of the request$"):
        _resolve({"tensor": 2}, tensors, "values")
