"""Chapter 1's first screen teaches before it reports: what SAPO is with a figure drawn by ``sapo_lab``, the
on-policy statement, what each part of the book enables, where the reader's first code goes, and "Should I use
SAPO?" as one sentence generated from the committed results that links to Chapter 16, with no term the chapter
has not defined (the statistics of Chapters 12-16 stay there)."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import IPython.display
import pytest

import sapo_lab.evidence.confirmatory as confirmatory

ROOT = Path(__file__).resolve().parents[2]
CELLS = json.loads((ROOT / "book" / "01_reading_map.ipynb").read_text())["cells"]
QUESTION = "## Should I use SAPO?"


def _text(cell) -> str:
    return "".join(cell["source"])


def _index(marker: str) -> int:
    return next(i for i, c in enumerate(CELLS) if c["cell_type"] == "markdown" and marker in _text(c))


def _markdown_before_the_question() -> str:
    return "\n".join(_text(c) for c in CELLS[: _index(QUESTION)] if c["cell_type"] == "markdown")


def test_no_term_of_the_evidence_chapters_appears_before_it_is_defined():
    # catches the 16-row table of declared answers, Holm's adjustment and intervals coming back to page one
    every_cell = "\n".join(_text(c) for c in CELLS)
    for term in ("Holm", "declared level", "G1", "G2", "G3", "G4", "G5"):
        assert term not in every_cell, term
    prose = "\n".join(_text(c) for c in CELLS if c["cell_type"] == "markdown")
    for term in ("Q1", "Q2", "Q3", "Q4", "best dev", "best-dev", "confidence interval", "paired seeds"):
        assert term not in prose, term


def test_the_first_screen_says_what_sapo_is_and_that_on_policy_it_is_grpo():
    # catches the on-policy sentence pushed below the reports again, or the plain explanation dropped
    first = _markdown_before_the_question()
    assert "## What SAPO is, in plain words" in first
    assert re.search(r"On-policy, SAPO's gradient equals GRPO's", first)
    assert first.index("What SAPO is") < first.index("On-policy")


def test_the_figure_is_drawn_from_sapo_labs_gate_and_clip():
    # catches a figure of typed numbers, or one left visible as code on the first screen
    figure = next(c for c in CELLS[: _index(QUESTION)] if c["cell_type"] == "code" and "plt" in _text(c))
    assert "gate_weight(" in _text(figure) and "ppo_clip_derivative(" in _text(figure)
    assert "hide-input" in figure["metadata"].get("tags", [])


def test_the_first_screen_says_what_each_part_enables_and_where_the_first_code_goes():
    # catches a part of the table of contents left out of the promises, and the first exercise not named
    toc = (ROOT / "_toc.yml").read_text()
    first = _markdown_before_the_question()
    for part in ("Foundations", "The SAPO objective", "Tokens and sequences", "Implementation and judgement",
                 "Training and evidence"):
        assert f"caption: {part}" in toc and f"**{part}**" in first, part
    written = first[first.index("## Where you write your first code"):]
    assert "(02_stochastic_policy.ipynb)" in written and "`make student`" in written


def _answer_shown(monkeypatch, results) -> str:
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **_: shown.extend(objs))
    monkeypatch.setattr(confirmatory, "confirmatory_results", lambda *a, **k: results)
    cell = next(_text(c) for c in CELLS[_index(QUESTION) + 1:] if c["cell_type"] == "code")
    exec(compile(cell, "<cell>", "exec"), {})
    return " ".join(o.data for o in shown if isinstance(o, IPython.display.Markdown))


def _planted(*intervals) -> dict:
    return {q: {"comparison": SimpleNamespace(t_interval=i)} for q, i in zip(("Q1", "Q2", "Q4"), intervals, strict=True)}


def test_should_i_use_sapo_is_one_generated_sentence_linking_chapter_16(monkeypatch):
    # catches a typed verdict (planted results that changed must change it), a count of the wrong side of
    # zero, and the link to the chapter where the table lives
    all_below = _answer_shown(monkeypatch, _planted((-0.2, -0.1), (-0.3, -0.1), (-0.1, -0.01)))
    mixed = _answer_shown(monkeypatch, _planted((-0.2, -0.1), (-0.05, 0.02), (0.01, 0.04)))
    assert all_below.startswith("Not on this book's evidence: in all three")
    assert "fewer new problems in one, more in one, and the two could not be told apart in one" in mixed
    for answer in (all_below, mixed):
        assert "[Chapter 16](16_conclusion.ipynb)" in answer and answer.count(". ") == 0


@pytest.mark.parametrize("hi", [0.0, 1e-9])
def test_an_interval_touching_zero_is_not_below_it(monkeypatch, hi):
    # catches "below" read as an upper end <= 0 (an interval that reaches zero holds it)
    answer = _answer_shown(monkeypatch, _planted((-0.2, -0.1), (-0.3, hi), (-0.1, -0.01)))
    assert "fewer new problems in two" in answer


def test_the_committed_answer_counts_the_committed_sides(monkeypatch):
    # counted here from the committed intervals: the displayed sentence must agree with them
    results = confirmatory.confirmatory_results()
    below = sum(results[q]["comparison"].t_interval[1] < 0 for q in ("Q1", "Q2", "Q4"))
    shown = _answer_shown(monkeypatch, results)
    assert shown.startswith("Not on this book's evidence") == (below == 3)


def test_the_live_chapters_open_with_make_lab():
    # catches the documented route that printed "Jupyter command `jupyter-lab` not found"
    text = "\n".join(_text(c) for c in CELLS)
    assert "`make lab`" in text and "jupyter lab book/" not in text
