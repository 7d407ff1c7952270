"""Each evidence chapter fits one 90-minute class, and the course plan's reading times are measured.

Measured on the notebook, up to its exercises (homework, not class time): the words of its
markdown, and the non-blank lines of the code a reader sees (cells tagged hide-input, hide-cell,
remove-cell, remove-input, solution or check are collapsed or absent in the page). Reading speed
is stated once, WORDS_PER_MINUTE: studying prose with equations, slower than reading aloud. The
limits: 35 minutes of reading (MAX_WORDS) and 400 visible code lines, about 30 screens of code and
output at a 1280 px window (13 lines a screen), leaving the rest of the class for running cells and
discussion.

book/instructor.md's session table states each session's reading time as an upper bound; the test
recomputes it from the same word counts, holds the bound to within SLACK_MINUTES of it, and holds it
within the half of a session set aside for reading.
"""

import json
import math
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORDS_PER_MINUTE = 100
MAX_READING_MINUTES = 35
MAX_WORDS, MAX_CODE_LINES = MAX_READING_MINUTES * WORDS_PER_MINUTE, 400
SESSION_READING_MINUTES = 45          # half of a 90-minute session (book/instructor.md)
SLACK_MINUTES = 5                     # a stated time may round the measured one up by this much
HIDDEN = {"hide-input", "hide-cell", "remove-cell", "remove-input", "solution", "check"}
CLASS_CHAPTERS = ("12_", "13_", "14_", "14b_", "15_", "15b_", "16_")
PLAN = ROOT / "book" / "instructor.md"
# | 7. Paired evidence | [12](12_reading_the_evidence.ipynb) | 35 | ...
SESSION_ROW = re.compile(r"^\| (\d+)\. [^|]+\| ([^|]+) \| (\d+) \|", re.M)
CHAPTER_LINK = re.compile(r"\]\(([0-9][0-9a-z]*_[a-z0-9_]+)\.ipynb\)")
SESSION_COUNT = re.compile(r"A suggested course of (\w+) sessions")
NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen".split()


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


def reading_minutes(words: int) -> int:
    return math.ceil(words / WORDS_PER_MINUTE)


def chapters():
    return [p for p in sorted((ROOT / "book").glob("*.ipynb")) if p.name.startswith(CLASS_CHAPTERS)]


def chapter_words(stem: str) -> int:
    return class_load(json.loads((ROOT / "book" / f"{stem}.ipynb").read_text())["cells"])[0]


def plan_problems(text: str, words: dict[str, int]) -> list[str]:
    """What is wrong with a session table: a stated time below the measured one or more than SLACK_MINUTES
    above it, a session over
    its reading half, a chapter in two sessions, and a session count in the prose that the table does not have."""
    out, seen = [], {}
    rows = SESSION_ROW.findall(text)
    for number, cells, stated in rows:
        stems = CHAPTER_LINK.findall(cells)
        measured = reading_minutes(sum(words[s] for s in stems))
        if not measured <= int(stated) <= measured + SLACK_MINUTES:
            out.append(f"session {number}: at most {stated} min stated, {measured} measured ({', '.join(stems)})")
        if measured > SESSION_READING_MINUTES:
            out.append(f"session {number}: {measured} min of reading, more than {SESSION_READING_MINUTES}")
        for stem in stems:
            if stem in seen:
                out.append(f"{stem} in sessions {seen[stem]} and {number}")
            seen[stem] = number
    said = SESSION_COUNT.search(text)
    if not rows or not said or NUMBER_WORDS.index(said.group(1)) != len(rows):
        out.append(f"the prose names {said and said.group(1)} sessions, the table has {len(rows)}")
    return out


@pytest.mark.parametrize("path", chapters(), ids=lambda p: p.stem)
def test_chapter_fits_a_class(path):
    words, code = class_load(json.loads(path.read_text())["cells"])
    assert words <= MAX_WORDS and code <= MAX_CODE_LINES, (
        f"{path.name}: {words} words and {code} visible code lines (limits {MAX_WORDS}, {MAX_CODE_LINES})")


def test_the_course_plan_states_measured_reading_times_that_fit_its_sessions():
    # Catches a reading time typed instead of measured, a chapter that grew past its session's reading
    # half, a chapter planned twice, and a session added to the table but not to the sentence above it.
    text = PLAN.read_text()
    stems = {s for _, cells, _ in SESSION_ROW.findall(text) for s in CHAPTER_LINK.findall(cells)}
    assert {p.stem for p in chapters()} <= stems, "a class chapter is missing from the course plan"
    assert plan_problems(text, {s: chapter_words(s) for s in stems}) == []


def test_the_plan_check_fails_on_a_wrong_time_an_overfull_session_and_a_repeat():
    words = {"02_a": 2000, "03_b": 2400, "04_c": 900}
    good = ("A suggested course of two sessions\n"
            "| 1. One | [2](02_a.ipynb), [3](03_b.ipynb) | 44 | g |\n| 2. Two | [4](04_c.ipynb) | 9 | g |\n")
    assert plan_problems(good, words) == []
    assert len(plan_problems(good.replace("| 44 |", "| 40 |"), words)) == 1      # below the measured 44
    assert len(plan_problems(good.replace("| 9 |", "| 15 |"), words)) == 1       # more than 5 above 9
    assert len(plan_problems(good, {**words, "03_b": 2600})) == 2          # 46 stated 44, and over 45
    assert len(plan_problems(good.replace("[4](04_c.ipynb)", "[2](02_a.ipynb)").replace("| 9 |", "| 20 |"),
                             words)) == 1
    assert len(plan_problems(good.replace("two sessions", "three sessions"), words)) == 1


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
