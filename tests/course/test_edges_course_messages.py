"""The schema of what a student's process may send, at each documented bound: the text cut to one line (two
spaces collapse, the limit itself gets no "...", a tab is no printable character), lists nested MAX_DEPTH = 8
deep, MAX_NUMBERS = 100000 numbers, shapes of up to 8 sizes. Each bound is typed here and tested on both sides."""

from __future__ import annotations

import json

import pytest

from sapo_lab.course.student_messages import Malformed, one_line, parse_event

CALLS = {"k": "group_advantages"}


def result_line(value, shape=None) -> bytes:
    meta = {"value": {"shape": [1] if shape is None else shape, "dtype": "float64"}}
    return json.dumps({"event": "result", "key": "k", "outputs": {"value": value}, "meta": meta}).encode()


def nested(depth: int):
    """A number inside ``depth`` lists: nested(2) is [[1.0]]."""
    value = 1.0
    for _ in range(depth):
        value = [value]
    return value


def test_two_spaces_collapse_to_one():
    """catches: only runs of three or more spaces collapsed: two spaces can still line up a column."""
    assert one_line("ok  total  85/85") == "ok total 85/85"


def test_a_text_of_exactly_the_limit_is_kept_whole_and_one_more_character_is_cut():
    """catches: "..." added to a text exactly at the limit (>= for >), or the limit off by one."""
    assert one_line("x" * 300) == "x" * 300
    assert one_line("x" * 301) == "x" * 300 + "..."
    assert one_line("abcdef", limit=5) == "abcde..."


def test_every_control_character_becomes_a_question_mark():
    """catches: a tab (or another control character) let through, which a terminal expands into a column."""
    assert one_line("a\tb\nc\rd\x1b[2J") == "a?b?c?d?[2J"


def test_lists_nested_eight_deep_pass_and_nine_deep_are_refused():
    """catches: the depth bound made inclusive the other way (9 levels accepted) or one short (8 refused)."""
    assert parse_event(result_line(nested(8)), CALLS)["outputs"]["value"] == nested(8)
    with pytest.raises(Malformed, match="^an output nests lists more than 8 deep$"):
        parse_event(result_line(nested(9)), CALLS)


def test_exactly_the_most_numbers_pass_and_one_more_is_refused():
    """catches: an output of exactly 100000 numbers refused (<= 0 for < 0 on the budget left)."""
    assert len(parse_event(result_line([0.5] * 100_000), CALLS)["outputs"]["value"]) == 100_000
    with pytest.raises(Malformed, match="^an output holds more than 100000 numbers$"):
        parse_event(result_line([0.5] * 100_001), CALLS)


def test_a_shape_of_eight_sizes_passes_and_nine_are_refused():
    """catches: the shape bound made strict (an 8-dimensional result refused as malformed)."""
    assert parse_event(result_line(1.0, shape=[1] * 8), CALLS)["meta"]["value"]["shape"] == [1] * 8
    with pytest.raises(Malformed, match="^meta of value has a shape that is not a list of sizes$"):
        parse_event(result_line(1.0, shape=[1] * 9), CALLS)
