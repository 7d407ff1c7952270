"""Each evidence chapter fits one 90-minute class.

Measured on the notebook, up to its exercises (homework, not class time): the words of its
markdown, and the non-blank lines of the code a reader sees (cells tagged hide-input, hide-cell,
remove-cell, remove-input, solution or check are collapsed or absent in the page). The limits:
3,500 words, about 25 minutes of reading aloud at 140 words a minute, and 400 visible code
lines, about 30 screens of code and output at a 1280 px window (13 lines a screen), leaving the
rest of the class for running cells and discussion.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_WORDS, MAX_CODE_LINES = 3500, 400
HIDDEN = {"hide-input", "hide-cell", "remove-cell", "remove-input", "solution", "check"}
CLASS_CHAPTERS = ("12_", "13_", "14_", "14b_", "15_", "15b_", "16_")


def class_load(cells: list[dict]) -> tuple[int, int]:
    """(words of markdown, visible non-blank code lines) of the cells before '## Exercises'."""
    words = code = 0
    for cell in cells:
        text = "".join(cell["source"])
        tags = set(cell.get("metadata", {}).get("tags", []))
        if cell["cell_type"] == "markdown":
            if text.startswith("## Exercises"):
                break
            words += len(re.findall(r"[A-Za-z][A-Za-z'’-]*", text))
        elif not tags & HIDDEN:
            code += sum(1 for line in text.split("\n") if line.strip())
    return words, code


def chapters():
    return [p for p in sorted((ROOT / "book").glob("*.ipynb")) if p.name.startswith(CLASS_CHAPTERS)]


@pytest.mark.parametrize("path", chapters(), ids=lambda p: p.stem)
def test_chapter_fits_a_class(path):
    words, code = class_load(json.loads(path.read_text())["cells"])
    assert words <= MAX_WORDS and code <= MAX_CODE_LINES, (
        f"{path.name}: {words} words and {code} visible code lines (limits {MAX_WORDS}, {MAX_CODE_LINES})")


def test_the_measure_counts_prose_and_visible_code_only():
    cells = [
        {"cell_type": "markdown", "source": ["Two words"]},
        {"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "\n", "y = 2"]},
        {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "source": ["assert x"]},
        {"cell_type": "markdown", "source": ["## Exercises\n", "not counted"]},
        {"cell_type": "code", "metadata": {}, "source": ["z = 3"]},
    ]
    assert class_load(cells) == (2, 2)


def test_the_split_chapters_are_both_measured():
    names = {p.stem for p in chapters()}
    assert {"14_critical_analysis", "14b_instability_and_tuning"} <= names
