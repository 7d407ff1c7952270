"""No answer is left where the student notebook keeps it.

``make student`` (tools/make_student.py) stubs only the cells tagged ``solution``. Prose that states an answer
but is not tagged, inside a gated solution block (``{solution-start}`` ... ``{solution-end}``, beside the check)
or right after it (or after a check that follows it), reaches the student before they write the answer. So:
inside a block every markdown cell is either tagged ``solution`` or the bare ``{solution-end}`` directive, and
the cell after a block (and its check) begins the next exercise or a new section. Catches "2/2^n" written under
the check of chapter 12's smallest-p exercise.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
END = re.compile(r"\A```\{solution-end\}\s*```\s*\Z")
NEXT = re.compile(r"\A(```\{exercise-start\}|:::\{exercise\}|#{1,4} )")


def _source(cell) -> str:
    return "".join(cell["source"])


def untagged_answers(cells) -> list[str]:
    """Where an untagged cell beside or after a gated solution could state its answer."""
    found, inside = [], False
    for i, cell in enumerate(cells):
        text, tags = _source(cell), cell["metadata"].get("tags", [])
        if "{solution-start}" in text:
            inside = True
            continue
        if not inside:
            continue
        if "{solution-end}" in text:
            inside = False
            if not END.match(text):
                found.append(f"cell {i}: text beside the {{solution-end}} directive")
            # a check may follow the block (chapter 13 puts it there); what comes after it must not be prose
            after = next(
                (c for c in cells[i + 1 :] if _source(c).strip() and "check" not in c["metadata"].get("tags", [])),
                None,
            )
            if after is not None and not NEXT.match(_source(after)):
                found.append(f"cell {i + 1}: prose right after a solution, neither an exercise nor a section")
        elif cell["cell_type"] == "markdown" and "solution" not in tags:
            found.append(f"cell {i}: untagged prose inside a solution")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_untagged_prose_beside_or_after_a_solution(path):
    assert untagged_answers(json.loads(path.read_text())["cells"]) == []


def _md(text, tags=None):
    return {"cell_type": "markdown", "metadata": {"tags": tags} if tags else {}, "source": [text]}


def test_the_rule_fails_on_an_answer_beside_the_check():
    start = _md("```{solution-start} ex-x\n:class: dropdown\n```")
    solution = {"cell_type": "code", "metadata": {"tags": ["solution"]}, "source": ["x = 1"]}
    check = {"cell_type": "code", "metadata": {"tags": ["check"]}, "source": ["assert x == 1"]}
    end = _md("```{solution-end}\n```")
    nxt = _md("```{exercise-start} Next\n:label: ex-y\n```")
    good = [start, solution, check, _md("Because 2/2^n.", ["solution"]), end, nxt]
    assert untagged_answers(good) == []
    assert len(untagged_answers([start, solution, check, _md(_source(end) + "\n\nBecause 2/2^n."), nxt])) == 1
    assert len(untagged_answers([start, solution, check, _md("Because 2/2^n."), end, nxt])) == 1
    assert len(untagged_answers([start, solution, check, end, _md("Because 2/2^n."), nxt])) == 1
    assert untagged_answers([start, solution, end, check, nxt]) == []
    assert len(untagged_answers([start, solution, end, check, _md("Because 2/2^n."), nxt])) == 1
