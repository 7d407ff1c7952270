"""Chapter 10's exercise checks without a kernel: the solution, the registered right answers and the stub as the
student notebook has them, and every registered wrong answer failing under its own name.

Catches a check that rejects the tanh form or float32 arithmetic, a wrong answer that is really right, and a
message that names another mistake (a detached-weight loss called a scaling slip, padding counted in the mean
called "the mask left out").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sapo_lab import policy_loss
from sapo_lab.course.checks import CheckFailed
from sapo_lab.course.exercises import check, check_quietly

NOTEBOOK = Path(__file__).resolve().parents[2] / "book" / "10_loss_implementation.ipynb"
CELLS = {c.get("id"): c for c in json.loads(NOTEBOOK.read_text())["cells"]}
EXERCISES = {"ex10-loss-solution": ("10.sapo_loss", "sapo_loss"),
             "ex10-grad-solution": ("10.sapo_gradient", "sapo_logp_gradient")}


def _define(source: str, name: str):
    namespace = {"torch": torch, "policy_loss": policy_loss}
    exec(source, namespace)  # noqa: S102 - the notebook's own registered answers
    return namespace[name]


def _variants(kind: str):
    for cell_id, (exercise_id, name) in EXERCISES.items():
        meta = CELLS[cell_id]["metadata"]
        if kind == "right":
            yield from ((exercise_id, name, r["why"], r["source"], None) for r in meta["right_answers"])
            yield exercise_id, name, "solution", "".join(CELLS[cell_id]["source"]), None
        else:
            yield from ((exercise_id, name, w["mistake"], w["source"], w["message"]) for w in meta["wrong_answers"])


@pytest.mark.parametrize("exercise_id, name, why, source, _", list(_variants("right")), ids=lambda v: str(v)[:40])
def test_right_answers_pass(exercise_id, name, why, source, _):
    torch.set_default_dtype(torch.float64)  # as the chapter sets it
    try:
        assert check_quietly(exercise_id, _define(source, name)), why
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("exercise_id, name, why, source, message", list(_variants("wrong")),
                         ids=lambda v: str(v)[:40])
def test_wrong_answers_fail_with_their_own_name(exercise_id, name, why, source, message):
    torch.set_default_dtype(torch.float64)
    try:
        with pytest.raises(CheckFailed) as err:
            check(exercise_id, _define(source, name))
    finally:
        torch.set_default_dtype(torch.float32)
    assert message in str(err.value), (why, str(err.value))


def test_the_stub_is_not_done_yet(capsys):
    for cell_id, (exercise_id, name) in EXERCISES.items():
        check(exercise_id, _define(CELLS[cell_id]["metadata"]["stub"], name))
        assert "not done yet" in capsys.readouterr().out
