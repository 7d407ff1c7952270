"""The report card's reading of its rows and the audit's arguments, on cards and arguments planted here: which rows
are checks, which are differences, what survives JSON, and which temperatures and dtypes the audit takes."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sapo_lab.conformance import ReportCard, Row, audit


def _card(*verdicts, finding_level="training") -> ReportCard:
    rows = [Row(f"property {i}", "paper", "measured", v, summary=f"row {i} ({v})") for i, v in enumerate(verdicts)]
    return ReportCard("planted", 1.0, 1.05, "float64", "token", rows, finding_level=finding_level)


# Catches: a note ("info") counted among the checks (a conforming loss with a caller-contract note would DIFFER),
# and a check that raised ("error") left out of the differences (the verdict line would count it, the list not).
def test_notes_are_not_checks_and_errors_are_differences():
    card = _card("pass", "info", "pass")
    assert card.passed and len(card.checks) == 2
    assert card.verdict_line().startswith("CONFORMS: all 2 checks")
    mixed = _card("pass", "error", "differs", "info")
    assert sorted(r.verdict for r in mixed.differences()) == ["differs", "error"]
    assert mixed.verdict_line().startswith("DIFFERS in 2 of 3 checks")


# Catches: the card's finding level lost on the way through JSON (a training-level card read back as a
# function-level one), and a non-finite measurement written as NaN (not JSON) instead of the text "nan".
def test_a_card_keeps_its_finding_level_and_non_finite_values_through_json():
    card = _card("pass", "differs")
    card.rows[1].values = {"max_error": math.inf, "tau": math.nan}
    text = card.to_json()
    back = ReportCard.from_dict(json.loads(text))
    assert back.finding_level == "training"
    assert json.loads(text)["rows"][1]["values"] == {"max_error": "inf", "tau": "nan"}


def plain_sapo(logp, old_logp, advantages, mask):
    tau = torch.full_like(advantages, 1.05).masked_fill(advantages > 0, 1.0)[:, None]
    token = -(4 / tau) * torch.sigmoid(tau * (torch.exp(logp - old_logp) - 1)) * advantages[:, None]
    m = mask.to(logp.dtype)
    n = m.sum(-1)
    keep = n > 0
    if not bool(keep.any()):
        return (token * m).sum()
    return ((token * m).sum(-1)[keep] / n[keep]).mean()


# Catches: an infinite temperature accepted (every gate weight 0 or undefined), and a dtype given as a torch dtype
# audited in float64 instead.
def test_the_audit_refuses_an_infinite_temperature_and_keeps_a_torch_dtype():
    for label in ("tau_pos", "tau_neg"):
        with pytest.raises(ValueError, match=f"{label} must be a finite number > 0, got inf"):
            audit(plain_sapo, **{label: math.inf})
    assert audit(plain_sapo, dtype=torch.float32).dtype == "float32"
