"""The student process's harness (sandbox.py) at its documented sizes and in its words, called in this process
on values built here: a tensor of exactly MAX_SENT = 100000 numbers is sent whole, an error line is cut at 200
characters, a part that is not a function is named with its article."""

from __future__ import annotations

import torch

from sapo_lab.course import sandbox


def test_a_tensor_of_exactly_the_most_numbers_is_sent_and_one_more_is_sent_as_its_size():
    """catches: the bound made strict (100000 numbers sent as "<a tensor of ...>", failing a right answer)."""
    assert sandbox._values(torch.zeros(100_000)) == [0.0] * 100_000
    assert sandbox._values(torch.zeros(100_001)) == "<a tensor of 100001 elements>"


def test_an_error_line_keeps_200_characters():
    """catches: the student's error cut shorter (or longer) than 200 characters: "ValueError: " is 12 of them."""
    line = sandbox._one_line(ValueError("x" * 300))
    assert line == "ValueError: " + "x" * 188


def test_a_part_that_is_not_a_function_is_named_with_its_article():
    """catches: the article inverted ("a int", "an str")."""
    assert sandbox._not_a_function("sapo_gate", 3) == "not a function: sapo_gate is an int; define sapo_gate() with def"
    assert sandbox._not_a_function("sapo_loss", "x") == "not a function: sapo_loss is a str; define sapo_loss() with def"
    assert sandbox._not_a_function("sapo_loss", None) == "missing: define sapo_loss()"


def test_a_masked_mean_whose_default_is_per_response_passes_on_responses_of_unequal_length():
    """catches: the default aggregation compared with the token_pool mean (a right masked_mean refused). Lengths
    2 and 1 make the two means differ: per response mean(1.5, 4) = 2.75, pooled 7 / 3."""
    def masked_mean(values, mask, aggregation="per_response"):
        if aggregation == "per_response":
            return ((values * mask).sum(-1) / mask.sum(-1)).mean()
        return (values * mask).sum() / mask.sum()

    values = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    mask = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    outputs, _ = sandbox.observe_with_meta("masked_mean", masked_mean, {"values": values, "mask": mask})
    assert abs(outputs["per_response"] - 2.75) < 1e-12 and abs(outputs["token_pool"] - 7 / 3) < 1e-12
