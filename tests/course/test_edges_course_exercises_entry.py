"""The check cells' entry points: ``check`` returns nothing (a cell shows its one line, not a stray True) and
``check_quietly`` gives the verdict silently, False for a wrong answer and for a stub."""

from __future__ import annotations

import torch

from sapo_lab.course.exercises import check, check_quietly


def right_gate(ratio, tau):
    tau = torch.as_tensor(tau, dtype=ratio.dtype)
    return 4 / tau * torch.sigmoid(tau * (ratio - 1))


def test_check_returns_nothing_for_a_right_answer(capsys):
    """catches: check() returning run_check's True, which a notebook cell would print under its line."""
    assert check("05.f_tau", right_gate) is None
    assert capsys.readouterr().out.startswith("correct: f_tau agrees with the reference")


def test_check_quietly_says_true_false_and_false_and_prints_nothing(capsys):
    """catches: a wrong answer (2 / tau for 4 / tau) or a stub reported as passing by check_quietly."""
    def stub(ratio, tau):
        raise NotImplementedError

    assert check_quietly("05.f_tau", right_gate) is True
    assert check_quietly("05.f_tau", lambda ratio, tau: right_gate(ratio, tau) / 2) is False
    assert check_quietly("05.f_tau", stub) is False
    assert capsys.readouterr().out == ""
