"""`python -m sapo_lab conformance` as a user types it: the verdict first, held to the paper's objective written
plainly (CONFORMS, exit 0) and to each planted mistake (named in the first three lines, exit 1).

Each test runs the command line on a module written to a temporary folder, as a user's own file would be.
"""

from __future__ import annotations

import json
import sys

import pytest

from sapo_lab.cli import main as cli_main
from sapo_lab.conformance import TEMPERATURE_NEG, ReportCard
from sapo_lab.conformance.card import WIDTH
from sapo_lab.objective import planted_mistakes

# The paper's objective written plainly: -(4/tau) sigmoid(tau (r - 1)) A, per-response mean, old log-probs used as
# data (no detach: the caller passes them without gradient).
PAPER = '''
import torch

def paper(logp, old_logp, advantages, mask):
    tau = torch.full_like(advantages, 1.05).masked_fill(advantages > 0, 1.0)[:, None]
    r = torch.exp(logp - old_logp)
    token = -(4 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None]
    m = mask.to(logp.dtype)
    n = m.sum(-1)
    keep = n > 0
    if not bool(keep.any()):
        return (token * m).sum()
    return ((token * m).sum(-1)[keep] / n[keep]).mean()

def missing_four_over_tau(logp, old_logp, advantages, mask):
    tau = torch.full_like(advantages, 1.05).masked_fill(advantages > 0, 1.0)[:, None]
    r = torch.exp(logp - old_logp)
    token = -torch.sigmoid(tau * (r - 1)) * advantages[:, None]
    m = mask.to(logp.dtype)
    return ((token * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()

def tau_in_float32(logp, old_logp, advantages, mask):
    # torch.where on Python floats makes a float32 tensor: 1.05 is held as 1.0499999523
    tau = torch.where(advantages > 0, 1.0, 1.05)[:, None]
    r = torch.exp(logp - old_logp)
    token = -(4 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None]
    m = mask.to(logp.dtype)
    return ((token * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()

def always_raises(logp, old_logp, advantages, mask):
    raise KeyError("completion_mask")
'''

PLANTED = '''
import functools
from sapo_lab.objective import planted_mistakes as m
{names}
'''

# The words that name each planted mistake (sapo_lab.objective.planted_mistakes) in the verdict's first lines.
NAMED = {
    "product without stop-gradient": "without stop-gradient",
    "fully detached weight": "a detached weight",
    "average over padding": "divided by the padded length",
    "behavior recomputed from current policy": "recomputed from the current policy",
}


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    for name in ("paper_losses", "planted"):  # a module of that name imported by another test is not ours
        monkeypatch.delitem(sys.modules, name, raising=False)
    (tmp_path / "paper_losses.py").write_text(PAPER)
    names = "\n".join(f"{fn.__name__} = functools.partial(m.{fn.__name__}, tau_pos=1.0, tau_neg=1.05)"
                      for fn in planted_mistakes.WRONG_IMPLEMENTATIONS.values())
    (tmp_path / "planted.py").write_text(PLANTED.format(names=names))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _run(argv, capsys):
    code = cli_main(["conformance", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _fits(text: str):
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not wide, wide


def test_the_papers_objective_conforms(user_dir, capsys):
    """The objective as the paper writes it, old log-probs as data: CONFORMS, exit 0, and a caller-contract note
    (not a failure) about passing old_logp without gradient."""
    code, out, _ = _run(["paper_losses:paper"], capsys)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "CONFORMS: all 15 checks match the paper (float64, token level)"
    notes = [line for line in lines if line.startswith("  note: ")]
    assert len(notes) == 1 and notes[0].startswith("  note: caller contract: pass old_logp without gradient"), out
    _fits(out)


def test_missing_four_over_tau_is_the_first_difference(user_dir, capsys):
    code, out, _ = _run(["paper_losses:missing_four_over_tau"], capsys)
    assert code == 1
    assert out.splitlines()[:2] == [
        "DIFFERS in 2 of 15 checks (float64, token level)",
        "  - on-policy gradient factor 0.25 / 0.2625 instead of 1: the 4/tau factor is missing"]


# Planted mistakes whose applied gradient is the paper's (only the value is wrong): training follows the paper, so
# the command line conforms and says so in its first lines.
GRADIENT_EQUIVALENT = {"fully detached weight"}


@pytest.mark.parametrize("name", list(planted_mistakes.WRONG_IMPLEMENTATIONS))
def test_each_planted_mistake_is_named_in_the_first_three_lines(name, user_dir, capsys):
    fn = planted_mistakes.WRONG_IMPLEMENTATIONS[name]
    code, out, _ = _run([f"planted:{fn.__name__}"], capsys)
    head = "\n".join(out.splitlines()[:3])
    if name in GRADIENT_EQUIVALENT:
        assert code == 0 and head.startswith("CONFORMS") and "gradient-equivalent" in head, out
    else:
        assert code == 1 and head.startswith("DIFFERS in "), out
    assert NAMED[name] in head, out
    _fits(out)


def test_every_mistake_has_its_words():
    assert set(NAMED) == set(planted_mistakes.WRONG_IMPLEMENTATIONS)


@pytest.mark.parametrize("target", ["paper_losses:paper", "paper_losses:missing_four_over_tau",
                                    "planted:behavior_recomputed_from_current"])
@pytest.mark.parametrize("flags", [[], ["--details"], ["--dtype", "float32"], ["--updates-per-rollout", "1"]])
def test_every_line_fits_100_columns(target, flags, user_dir, capsys):
    _, out, _ = _run([target, *flags], capsys)
    _fits(out)
    if "--details" in flags:  # every check is listed, each with its verdict
        assert sum(line.startswith("[") for line in out.splitlines()) == 17


def test_details_and_json_carry_the_full_card(user_dir, capsys):
    code, out, _ = _run(["paper_losses:missing_four_over_tau", "--json"], capsys)
    card = ReportCard.from_dict(json.loads(out))
    assert code == 1 and len(card.rows) == 17 and card.finding_level == "function"
    assert json.loads(out)["verdict"] == "DIFFERS in 2 of 15 checks (float64, token level)"
    assert _run(["paper_losses:missing_four_over_tau", "--json", "card.json"], capsys)[0] == 1
    assert json.loads((user_dir / "card.json").read_text())["rows"] == json.loads(out)["rows"]


def test_a_loss_that_always_raises_is_one_line_exit_2(user_dir, capsys):
    code, out, err = _run(["paper_losses:always_raises"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "raised KeyError: 'completion_mask'" in err, err


def test_tau_held_in_float32_is_recognised(user_dir, capsys):
    """1.05 stored in float32 is 1.0499999523: the audit says so and conforms to float32's precision."""
    code, out, _ = _run(["paper_losses:tau_in_float32"], capsys)
    assert code == 0, out
    assert "  note: tau_neg is held in float32 (1.049999952)" in out  # the hint, without --details
    code, out, _ = _run(["paper_losses:tau_in_float32", "--details"], capsys)
    assert "the loss holds tau_neg in float32 (1.049999952" in out
    code, out, _ = _run(["paper_losses:tau_in_float32", "--json"], capsys)
    row = ReportCard.from_dict(json.loads(out)).row(TEMPERATURE_NEG)
    assert row.values["tau_held"] == pytest.approx(1.0499999523, abs=1e-9) and row.verdict == "pass"


def test_on_policy_setting_says_sapo_equals_grpo(user_dir, capsys):
    code, out, _ = _run(["paper_losses:paper", "--updates-per-rollout", "1"], capsys)
    assert code == 0 and "SAPO's gradient equals GRPO's and" in out and "tau has no effect" in out
    assert "GRPO" not in _run(["paper_losses:paper"], capsys)[1]
    assert _run(["paper_losses:paper", "--updates-per-rollout", "0"], capsys)[0] == 2


def test_help_states_the_contract(capsys):
    with pytest.raises(SystemExit):
        cli_main(["conformance", "--help"])
    out = capsys.readouterr().out
    for words in ("fn(logp, old_logp, advantages, mask) -> scalar", "(B, T)", "(B,)", "bool", "float64",
                  "exit status: 0 conforms, 1 differs, 2", "example:", "python -m sapo_lab conformance my_loss.py:"):
        assert words in out, words
    _fits(out)
