"""`python -m sapo_lab conformance` on losses an outside tester wrote: a loss that exits, one that changes its
inputs in place, and lines that named the wrong cause. Each ends in one true line (exit 2 where nothing was audited).

Every loss is written plainly in a user's module, as the tester wrote it: the paper's -(4/tau) sigmoid(tau (r - 1)) A
with a per-response mean, changed in one place.
"""

from __future__ import annotations

import pytest
from _user_module import install_user_module, run_conformance

LOSSES = '''
import os
import sys

import torch


def _token(logp, old_logp, advantages):
    r = torch.exp(logp - old_logp.detach())
    A = advantages[:, None]
    tau = torch.where(A > 0, torch.full_like(A, 1.0), torch.full_like(A, 1.05))
    return -A * (4.0 / tau) * torch.sigmoid(tau * (r - 1))


def paper(logp, old_logp, advantages, mask):
    m = mask.to(logp.dtype)
    return ((_token(logp, old_logp, advantages) * m).sum(1) / m.sum(1).clamp(min=1)).mean()


def plain_count(logp, old_logp, advantages, mask):
    m = mask.to(logp.dtype)
    return ((_token(logp, old_logp, advantages) * m).sum(1) / m.sum(1)).mean()


def nan_to_num(logp, old_logp, advantages, mask):
    m = mask.to(logp.dtype)
    return torch.nan_to_num((_token(logp, old_logp, advantages) * m).sum(1) / m.sum(1)).mean()


def no_mask(logp, old_logp, advantages, mask):
    return _token(logp, old_logp, advantages).mean()


def exits_0(logp, old_logp, advantages, mask):
    sys.exit(0)


def exits_1(logp, old_logp, advantages, mask):
    raise SystemExit(1)


def os_exit_0(logp, old_logp, advantages, mask):
    os._exit(0)


def fills_mask(logp, old_logp, advantages, mask):
    out = paper(logp, old_logp, advantages, mask)
    advantages.mul_(-1)
    mask.fill_(True)
    return out
'''

EXITS_AT_IMPORT = '''
import sys
sys.exit(0)
def loss(logp, old_logp, advantages, mask):
    pass
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    install_user_module(tmp_path, monkeypatch, "tester_losses", LOSSES)
    (tmp_path / "exits_at_import.py").write_text(EXITS_AT_IMPORT)
    monkeypatch.delitem(__import__("sys").modules, "exits_at_import", raising=False)
    return tmp_path


def _one_line_exit_2(code, out, err):
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    return err


# ---- a loss or a module that exits: never exit 0 (CONFORMS) or 1 (DIFFERS) with no card ----

@pytest.mark.parametrize("target, words", [
    ("tester_losses:exits_0", "called sys.exit(0)"),
    ("tester_losses:exits_1", "called sys.exit(1)"),
    ("exits_at_import:loss", "called sys.exit(0) while importing"),
    ("exits_at_import.py:loss", "called sys.exit(0) while importing"),
    ("tester_losses:os_exit_0", "ended the audit's process (exit status 0"),
])
def test_a_loss_that_exits_is_one_line_exit_2(target, words, user_dir, capsys):
    """Catches SystemExit or os._exit ending the audit with the user's status: 0 read as a pass, 1 as DIFFERS."""
    err = _one_line_exit_2(*run_conformance([target], capsys))
    assert words in err and "nothing was audited" in err, err


# ---- a loss that changes its arguments in place ----

def test_a_loss_that_fills_its_mask_is_audited_on_copies_and_told(user_dir, capsys):
    """Catches the audit's own batch changed by the loss (it crashed in max() on an empty selection) and a mutation
    left unsaid: the card is the paper's, with one note naming the arguments changed."""
    code, out, err = run_conformance(["tester_losses:fills_mask"], capsys)
    assert code == 0 and out.startswith("CONFORMS"), (code, out, err)
    notes = [line for line in out.splitlines() if "changes its arguments in place" in line]
    assert len(notes) == 1 and "(advantages, mask)" in notes[0], out


def test_a_loss_that_changes_nothing_gets_no_mutation_note(user_dir, capsys):
    """Catches the note raised for every loss (a comparison that always differs, e.g. a NaN never equal to itself)."""
    code, out, _ = run_conformance(["tester_losses:paper"], capsys)
    assert code == 0 and "in place" not in out, out


# ---- lines that named the wrong cause ----

def test_no_mask_is_not_called_a_nan(user_dir, capsys):
    """A finite loss with a gradient on padding: the empty-batch line must say padding is trained, not 'a silent
    NaN' (catches the old wording for every failure of the row)."""
    code, out, _ = run_conformance(["tester_losses:no_mask"], capsys)
    line = next(x for x in out.splitlines() if "a batch without tokens" in x)
    assert code == 1 and "NaN" not in line and "nonzero gradient" in line, out


def test_a_finite_loss_with_a_nan_gradient_is_not_called_non_finite(user_dir, capsys):
    """nan_to_num makes the empty response's loss -1.0 but leaves the NaN in its gradient: the line must say the loss
    is finite and the gradient is not (catches 'non-finite: loss -1.0')."""
    code, out, _ = run_conformance(["tester_losses:nan_to_num", "--details"], capsys)
    assert code == 1 and "non-finite: loss" not in out, out
    assert "a finite loss (-1) but a non-finite gradient" in out, out


def test_a_huge_tau_is_not_explained_as_float32(user_dir, capsys):
    """float32(1e300) is inf: a loss at tau = 1 audited at --tau-pos 1e300 must differ on that temperature, not
    pass it as 'held in float32 (inf)' (catches an inf tolerance that accepts every fit)."""
    code, out, _ = run_conformance(["tester_losses:paper", "--tau-pos", "1e300", "--dtype", "float64"], capsys)
    assert code == 1 and "float32" not in out, out
    assert "temperature for A > 0: tau = 1 instead of 1e+300" in out, out


# ---- a plain loss whose only fault is the empty response ----

@pytest.mark.parametrize("target", ["tester_losses:plain_count", "tester_losses:nan_to_num"])
def test_only_the_empty_cases_differ_and_the_first_line_says_so(target, user_dir, capsys):
    """Catches a first line that leaves the user to suspect the gate when only a 0/0 on empty responses differs,
    and an honest DIFFERS turned into CONFORMS (a NaN on an empty response reaches the whole update)."""
    code, out, _ = run_conformance([target], capsys)
    lines = out.splitlines()
    assert code == 1 and lines[0].endswith("only where responses are empty"), out
    assert "every other check conforms" in out and "clamped to >= 1" in out, out


def test_a_difference_elsewhere_does_not_read_as_empty_only(user_dir, capsys):
    """no_mask differs on empty batches and on aggregation: its first line must not say 'only where responses are
    empty' (catches the test on the empty rows being a subset check the wrong way round)."""
    code, out, _ = run_conformance(["tester_losses:no_mask"], capsys)
    assert code == 1 and "only where" not in out.splitlines()[0] and "every other check" not in out, out
