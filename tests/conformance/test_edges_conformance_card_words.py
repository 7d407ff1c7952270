"""The conformance card's words and bounds, each on both sides: the verdict line, the precision lines, the notes,
the allowance line, the command's flags. Cards are built by hand from rows whose verdicts are typed here, so the
expected words follow from the rows and not from the code under test."""

import argparse
import math
import types

import pytest
import torch

from sapo_lab.conformance.card import ReportCard, Row
from sapo_lab.conformance.cli import ConformanceUsageError, LossOutput, _check_flags, add_flags, load_target
from sapo_lab.conformance.engine import allowance_text, compare_precision
from sapo_lab.conformance.gradient import _fit_points
from sapo_lab.conformance.names import (
    EMPTY_BATCH,
    EMPTY_RESPONSE,
    EXTREME,
    GRADIENT,
    LEVEL,
    ON_POLICY,
    VALUE_AT_ONE,
    ZERO_ADVANTAGE,
)


def _row(prop, verdict, summary="", values=None):
    return Row(prop, "paper", f"measured {prop}", verdict, values=values or {}, summary=summary)


def _card(rows, dtype="float64", **kw):
    return ReportCard("loss", 1.5, 0.5, dtype, "token", rows=rows, **kw)


def test_only_an_empty_batch_differing_reads_as_empty_only():
    """Catches the empty-only reading limited to an empty response: a card whose one difference is the batch
    without tokens is still 'only where responses are empty'; with the gradient differing too it is not."""
    card = _card([_row(GRADIENT, "pass"), _row(EMPTY_BATCH, "differs", "a batch without tokens returns nan")])
    assert card.verdict_line() == "DIFFERS in 1 of 2 checks (float64, token level): only where responses are empty"
    mixed = _card([_row(GRADIENT, "differs"), _row(EMPTY_RESPONSE, "differs")])
    assert mixed.verdict_line() == "DIFFERS in 2 of 2 checks (float64, token level)"


def test_a_difference_only_at_another_precision_fails_the_card():
    """Catches ``passed`` reading this precision's rows alone: every row passes in float64, but float32 differs on
    the gradient, so the card does not pass and the count says where."""
    precisions = {"float32": {"audited": True, "differs_only_here": {GRADIENT: "gradient off"}}}
    card = _card([_row(GRADIENT, "pass"), _row(LEVEL, "pass")], precisions=precisions)
    assert card.passed is False
    assert card.verdict_line() == "DIFFERS in 1 of 2 checks (float64, token level; 1 of them only in float32)"


def test_the_leading_finding_comes_first_and_survives_json():
    """Catches the lead ranked like any row (zero advantages sort after the on-policy factor) and the lead lost
    through to_dict/from_dict."""
    rows = [_row(ON_POLICY, "differs", "on-policy"), _row(ZERO_ADVANTAGE, "differs", "advantage-free term")]
    card = _card(rows, lead=ZERO_ADVANTAGE)
    assert [r.property for r in card.differences()] == [ZERO_ADVANTAGE, ON_POLICY]
    again = ReportCard.from_dict(card.to_dict())
    assert again.lead == ZERO_ADVANTAGE
    assert [r.property for r in again.differences()] == [ZERO_ADVANTAGE, ON_POLICY]
    assert [r.property for r in _card(rows).differences()] == [ON_POLICY, ZERO_ADVANTAGE]


def test_a_passing_row_with_a_remark_is_a_note():
    """Catches notes read from info rows only: a pass row that carries a summary (a credited clamp) is shown as a
    note; a pass row without one is not."""
    card = _card([_row(EXTREME, "pass", "gradient 0 above log r = +20.00 (harmless)"), _row(GRADIENT, "pass"),
                  _row(VALUE_AT_ONE, "info", "centred")])
    assert [r.property for r in card.notes()] == [EXTREME, VALUE_AT_ONE]
    assert "  note: gradient 0 above log r = +20.00 (harmless)\n" in card.to_text()


def test_precision_lines_say_which_way_each_precision_disagrees():
    """Catches 'differs where ... conforms' and 'conforms where ... differs' exchanged: float32 differs on the
    gradient where float64 conforms and conforms on the level where float64 differs."""
    precisions = {"float32": {"audited": True, "differs_only_here": {GRADIENT: "x"}, "passes_only_here": [LEVEL]},
                  "bfloat16": {"audited": False, "reason": "the loss raised on bfloat16"}}
    lines = _card([_row(GRADIENT, "pass"), _row(LEVEL, "differs")], precisions=precisions).precision_lines()
    assert lines == [f"float32: differs where float64 conforms: {GRADIENT}; conforms where float64 differs: {LEVEL}",
                     "bfloat16: not audited: the loss raised on bfloat16"]


def test_an_overflow_at_the_exp_range_and_past_it_read_differently():
    """Catches the 'at the exp range' reading narrowed: ln(float32 max) = 88.7228; a NaN from log r = 88.70 (0.02
    below it) is exp overflowing, one from 88.60 (0.12 below) is read as NaN above a threshold short of it."""
    limit = math.log(torch.finfo(torch.float32).max)

    def line(above):
        precisions = {"float32": {"audited": True, "overflow_above": above, "exp_range": limit}}
        return _card([_row(GRADIENT, "pass")], precisions=precisions).precision_lines()[0]

    assert line(88.70).startswith("float32: agrees with float64; exp(log r) overflows it above log r = +88.70")
    assert line(88.60).startswith("float32: agrees with float64; NaN above log r = +88.60, past its exp range "
                                  "(log r > 88.72)")


def test_a_pipe_in_a_markdown_cell_is_escaped():
    """Catches Markdown cells written raw: a measurement 'a | b' would split its table row in two."""
    card = _card([Row(GRADIENT, "paper", "a | b", "pass")])
    assert "| a \\| b | pass |" in card.to_markdown()


def test_the_allowance_is_loosened_only_above_the_dtype_own():
    """Catches 'loosened' said when the held dtype's allowance equals the audit's own (float32 at float32) and
    the credit threshold taken as the smaller of 1e-6 and the allowance: float64 allows 1e-9, credits up to 1e-6;
    float32 allows 1e-4 and credits up to 1e-4 (the larger of the two)."""
    assert allowance_text("float64", 1e-9) == (
        "allowance (float64): a difference up to 1e-09 of the on-policy gradient is rounding; a clamp is credited "
        "when it changes no gradient by more than 1e-06 of it")
    assert "loosened" not in allowance_text("float32", 1e-4, torch.float32)
    assert "more than 1e-04 of it" in allowance_text("float32", 1e-4, torch.float32)
    assert "(loosened from float64's 1e-09 to float32's" in allowance_text("float64", 1e-4, torch.float32)


def _precision_pair(narrow_dtype):
    wide = _card([_row(GRADIENT, "pass"), _row(EXTREME, "pass")])
    narrow = _card([_row(GRADIENT, "differs", "per-token gradient: off because of a cause",
                         values={"measurement": "max rel. error 0.3"}), _row(EXTREME, "pass")], dtype=narrow_dtype)
    return compare_precision(wide, narrow)["differs_only_here"][GRADIENT]


def test_only_bfloat16_lines_drop_the_cause():
    """Catches the measurement-only line applied to float32 instead of bfloat16 (whose rounding can mimic a
    cause): float32 keeps the row's own line, bfloat16 says the measurement alone."""
    assert _precision_pair("float32") == "per-token gradient: off because of a cause"
    assert _precision_pair("bfloat16") == f"{GRADIENT}: max rel. error 0.3"


def _flags(**kw):
    base = dict(tau_pos=1.0, tau_neg=1.05, updates_per_rollout=None, timeout=None)
    return types.SimpleNamespace(**{**base, **kw})


def test_updates_per_rollout_accepts_one_and_refuses_zero():
    """Catches '--updates-per-rollout must be >= 1' checked as > 1: 1 is the on-policy setting the help names."""
    _check_flags(_flags(updates_per_rollout=1))
    with pytest.raises(ConformanceUsageError, match="--updates-per-rollout must be >= 1, got 0"):
        _check_flags(_flags(updates_per_rollout=0))


def test_timeout_must_be_positive():
    """Catches --timeout 0 accepted (the audit would stop before its first call); 0.001 s is valid."""
    _check_flags(_flags(timeout=0.001))
    with pytest.raises(ConformanceUsageError, match="--timeout must be a finite number of seconds > 0, got 0"):
        _check_flags(_flags(timeout=0.0))


def test_the_temperature_defaults_are_the_papers_and_distinct():
    """Catches a default tau_neg of 1.0 (the paper's is 1.05) or the two defaults exchanged."""
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args(["m:f"])
    assert (args.tau_pos, args.tau_neg) == (1.0, 1.05)


def test_a_file_target_in_the_working_directory(tmp_path, monkeypatch):
    """Catches a FILE.py target needing a folder in its path to be read as a file: 'my_loss.py:f' from the
    folder that holds it names the file, not a module called 'my_loss.py'."""
    (tmp_path / "my_loss.py").write_text("def f(logp, old_logp, advantages, mask):\n    return 7\n")
    monkeypatch.chdir(tmp_path)
    assert load_target("my_loss.py:f")(None, None, None, None) == 7


@pytest.mark.parametrize(("text", "said"), [
    ("one line without a newline", "printed 1 line on stdout"),
    ("first\nsecond\n", "printed 2 lines on stdout"),
    ("first\nsecond", "printed 2 lines on stdout"),
])
def test_the_loss_output_note_counts_lines(text, said):
    """Catches a last line without a newline left uncounted and '1 lines': the count is worked out from the
    text (newlines, plus one for an unfinished last line)."""
    output = LossOutput(descriptors=False)
    with output:
        import sys

        sys.stdout.write(text)
    assert said in output.note()


def _fit_context():
    return types.SimpleNamespace(tol=types.SimpleNamespace(negligible=1e-8, tau=1e-9))


def test_the_temperature_fit_starts_at_distance_0_4():
    """Catches the fit's 'at least 0.4 from r = 1' made 'more than 0.4': r = 0.6 (1 - 0.6 == 0.4 exactly in
    binary) is fitted, r = 0.61 is not. rho = r sech^2(tau (r - 1) / 2) with tau = 2, so the fit gives 2 back."""
    r = torch.tensor([1.0, 0.6, 0.61], dtype=torch.float64)
    tau = 2.0
    rho = r / torch.cosh(tau * (r - 1.0) / 2) ** 2
    points = _fit_points(_fit_context(), r, rho)
    assert [p[0] for p in points] == [0.6]
    assert points[0][1] == pytest.approx(2.0, rel=1e-12)
