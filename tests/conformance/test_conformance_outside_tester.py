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
