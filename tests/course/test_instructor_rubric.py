"""The instructor page's points and rubric match the exercises.

Every exercise whose kind (its ``*Difficulty ...; KIND.*`` line) includes a written answer or a proof has a
rubric row on book/instructor.md, every row names an exercise of the book, and its points follow the stated
scale (2 per star). A row that is partly written gives its split in points that add up to the row's points.
Catches an exercise given a written part without a rubric line, a row left behind by a renamed exercise, and
points that disagree with the difficulty.
"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIFFICULTY = re.compile(r":label: (ex-\S+)\n```.*?\*Difficulty (★+)☆* \([^)]*\); ([^*]+)\.\*", re.S)
ROW = re.compile(r"^\| \{numref\}`(ex-[^`]+)` \| (\d+) \| (.+) \|$", re.M)


def book_exercises() -> dict[str, tuple[int, str]]:
    """label -> (stars, kind)."""
    found = {}
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for label, stars, kind in DIFFICULTY.findall("".join(cell["source"])):
                found[label] = (len(stars), kind)
    return found


def rubric() -> dict[str, tuple[int, str]]:
    text = (ROOT / "book" / "instructor.md").read_text()
    return {label: (int(points), what) for label, points, what in ROW.findall(text)}


def problems(exercises, rows) -> list[str]:
    out = [f"{label}: rubric row for no exercise" for label in rows if label not in exercises]
    for label, (stars, kind) in exercises.items():
        needs_row = "written" in kind or "proof" in kind
        if needs_row and label not in rows:
            out.append(f"{label}: a {kind} exercise without a rubric row")
        if label in rows:
            points, what = rows[label]
            if points != 2 * stars:
                out.append(f"{label}: {points} points for {stars} stars")
            split = [int(p) for p in re.findall(r"\((\d+)[);]", what)]
            if what.startswith("check passes") and len(split) >= 2 and sum(split[:2]) != points:
                out.append(f"{label}: split {split[:2]} does not add up to {points}")
    return out


def test_every_written_exercise_has_a_rubric_row_with_its_points():
    exercises, rows = book_exercises(), rubric()
    assert len(exercises) >= 50 and len(rows) >= 25
    assert problems(exercises, rows) == []


def test_the_check_fails_on_a_missing_row_and_wrong_points():
    exercises = {"ex-1-a": (2, "computation and written answer"), "ex-1-b": (1, "computation")}
    assert problems(exercises, {"ex-1-a": (4, "check passes (2); why (2)")}) == []
    assert len(problems(exercises, {})) == 1
    assert len(problems(exercises, {"ex-1-a": (2, "check passes (1); why (1)")})) == 1
    assert len(problems(exercises, {"ex-1-a": (4, "check passes (2); why (1)")})) == 1
    assert len(problems(exercises, {"ex-1-a": (4, "x"), "ex-9-gone": (2, "y")})) == 1
