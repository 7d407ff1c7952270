"""The book's coded exercises as the grading test sees them: solution, check and registered wrong answers.

A coded exercise is a code cell tagged ``solution``; its check is the next cell tagged ``check`` before the
next ``exercise-start``; its wrong answers are the solution cell's ``wrong_answers`` metadata, each a
plausible mistake (``mistake``), a replacement for the solution cell (``source``) and, optionally, a piece of the
message the check must print on it (``message``: the mistake's name); its ``right_answers`` are other correct
solutions (``why``: how it differs, ``source``), which the check must accept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


@dataclass
class Exercise:
    notebook: str
    label: str
    solution: int  # cell index
    check: int | None
    wrong: list[dict] = field(default_factory=list)
    right: list[dict] = field(default_factory=list)


def _source(cell) -> str:
    return "".join(cell["source"])


def exercises(path: Path) -> list[Exercise]:
    cells = json.loads(path.read_text())["cells"]
    found, label = [], None
    for i, cell in enumerate(cells):
        text = _source(cell)
        if cell["cell_type"] == "markdown" and "exercise-start" in text:
            label = text.split(":label:")[1].split()[0]
        tags = cell["metadata"].get("tags", [])
        if cell["cell_type"] == "code" and "solution" in tags:
            check = None
            for j in range(i + 1, len(cells)):
                if "exercise-start" in _source(cells[j]):
                    break
                if "check" in cells[j]["metadata"].get("tags", []):
                    check = j
                    break
            found.append(Exercise(path.name, label, i, check, cell["metadata"].get("wrong_answers", []),
                                  cell["metadata"].get("right_answers", [])))
    return found


def notebooks_with_exercises() -> list[Path]:
    return [p for p in sorted(BOOK.glob("*.ipynb")) if exercises(p)]
