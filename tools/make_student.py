"""Write student notebooks: every solution replaced by a stub, every check kept.

A teacher notebook marks a coded solution with the cell tag ``solution`` and the asserts that judge it with
``check``; a written answer is a markdown cell tagged ``solution``. The student copy replaces each solution cell
by a stub (code: "your code here" and ``raise NotImplementedError``; markdown: an empty answer) and leaves every
other cell, checks included, byte for byte as it was, so students run the check to learn whether they are right.
A solution cell's ``wrong_answers`` and ``right_answers`` metadata (the plausible mistakes and the other correct
formulations tests/course/test_exercise_checks.py runs each check against) and its ``stub`` (a function exercise's
own stub: its signature and ``raise NotImplementedError``, which the check reports as "not done yet") stay in the
teacher notebook only.

    python tools/make_student.py [OUTPUT_DIR]      # default: student/

The teacher notebooks are only read. Before writing, the script checks the round trip: putting the teacher's
solutions back into the student copy gives the teacher notebook exactly.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = "solution"
WRONG_ANSWERS = "wrong_answers"
RIGHT_ANSWERS = "right_answers"
# A function exercise's own stub (its signature, docstring and ``raise NotImplementedError``): the check then
# reports "not done yet" instead of failing, so the rest of the student notebook runs without the answer.
STUB = "stub"
TEACHER_ONLY = (WRONG_ANSWERS, RIGHT_ANSWERS, STUB)
CODE_STUB = ("# Your code here: solve the exercise above, then run the check cell below.\n"
             'raise NotImplementedError("your code here")')
TEXT_STUB = "**Your answer here.**"


def is_solution(cell: dict) -> bool:
    return SOLUTION in cell.get("metadata", {}).get("tags", [])


def is_stub(cell: dict) -> bool:
    text = "".join(cell["source"])
    return is_solution(cell) and (text in (CODE_STUB, TEXT_STUB) or "raise NotImplementedError" in text)


def stub_source(cell: dict) -> str:
    """The stub that replaces a solution cell: the exercise's own (a function to fill in) or the generic one."""
    if cell["cell_type"] != "code":
        return TEXT_STUB
    return cell.get("metadata", {}).get(STUB) or CODE_STUB


def student_notebook(teacher: dict) -> dict:
    """A copy of ``teacher`` with each solution cell replaced by a stub of the same kind, id and tags."""
    student = copy.deepcopy(teacher)
    for cell in student["cells"]:
        if is_solution(cell):
            cell["source"] = stub_source(cell).splitlines(keepends=True)
            for key in TEACHER_ONLY:
                cell["metadata"].pop(key, None)
            if cell["cell_type"] == "code":
                cell["outputs"], cell["execution_count"] = [], None
    return student


def restore(student: dict, teacher: dict) -> dict:
    """Put the teacher's solution cells back into a student notebook (the inverse of ``student_notebook``)."""
    restored = copy.deepcopy(student)
    if len(restored["cells"]) != len(teacher["cells"]):
        raise ValueError("student and teacher notebooks have different numbers of cells")
    for i, (s, t) in enumerate(zip(restored["cells"], teacher["cells"], strict=True)):
        if is_solution(s):
            restored["cells"][i] = copy.deepcopy(t)
    return restored


def dumps(nb: dict) -> str:
    """The notebook as the repository stores it (nbformat's layout: indent 1, UTF-8, final newline)."""
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "student"
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        text = path.read_text()
        teacher = json.loads(text)
        if not any(is_solution(c) for c in teacher["cells"]):
            continue
        student = student_notebook(teacher)
        if dumps(restore(student, teacher)) != text:
            print(f"error: {path.name}: the student round trip does not give the teacher notebook back", file=sys.stderr)
            return 1
        (out / path.name).write_text(dumps(student))
        written += 1
    print(f"wrote {written} student notebooks to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
