"""Student notebooks (tools/make_student.py): stubs where solutions were, checks kept, teacher unchanged."""

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("make_student", ROOT / "tools" / "make_student.py")
make_student = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_student)

TEACHER = [p for p in sorted((ROOT / "book").glob("*.ipynb"))
           if any(make_student.is_solution(c) for c in json.loads(p.read_text())["cells"])]


def test_there_are_student_notebooks():
    assert len(TEACHER) >= 10


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in TEACHER}
    out = tmp_path_factory.mktemp("student")
    assert make_student.main([str(out)]) == 0
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in TEACHER}
    assert before == after, "make_student must not modify the teacher notebooks"
    return out


@pytest.mark.parametrize("path", TEACHER, ids=lambda p: p.name)
def test_student_copy_stubs_solutions_keeps_everything_else_and_round_trips(written, path):
    teacher = json.loads(path.read_text())
    student = json.loads((written / path.name).read_text())
    assert make_student.dumps(make_student.restore(student, teacher)) == path.read_text()
    for s, t in zip(student["cells"], teacher["cells"], strict=True):
        if make_student.is_solution(t):
            assert "".join(s["source"]) == make_student.stub_source(t), \
                "a solution cell survived into the student notebook"
            assert make_student.WRONG_ANSWERS not in s["metadata"], "a registered wrong answer reached the student"
            assert "".join(s["source"]) != "".join(t["source"])
        else:
            assert s == t, "a non-solution cell changed"
    checks = [c for c in student["cells"] if "check" in c["metadata"].get("tags", [])]
    judging = ("check(", "expect(", "assert ")
    assert all(any(word in "".join(c["source"]) for word in judging) for c in checks), \
        "a check cell that judges nothing (no check(, expect( or assert)"


# What a student notebook runs before its first stub is the teacher's cells unchanged (the round-trip test
# above), and nbval executes every teacher notebook in full, ending with a hidden cell that drives each live
# explorer (sapo_lab.viz.explore.drive_live_explorers). Re-executing every student copy would repeat that work;
# the static checks below make sure the teacher run covers the student's, and one student copy is executed
# end to end, every stub in place, in a fresh kernel.
SMOKE = "03_group_advantages.ipynb"


def _code(cells):
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", TEACHER, ids=lambda p: p.name)
def test_live_explorers_sit_before_the_exercises_and_the_last_cell_drives_them_all(path):
    """Catches an explorer placed after the first exercise (a student would never reach it), a chapter whose
    drive cell is missing or not last (nbval would not drive its controls), and a wrong expected count."""
    cells = json.loads(path.read_text())["cells"]
    first = next(i for i, c in enumerate(cells) if make_student.is_solution(c))
    n_explorers = sum(s.count("live_explorer(") for s in _code(cells))
    assert all("live_explorer(" not in s for s in _code(cells[first:])), "a live explorer after the exercises"
    last = _code(cells)[-1]
    if n_explorers:
        assert f"drive_live_explorers(expected={n_explorers})" in last
        assert "remove-cell" in cells[-1]["metadata"].get("tags", [])
    else:
        assert "drive_live_explorers" not in "".join(_code(cells))


@pytest.mark.slow
def test_one_student_notebook_runs_to_the_end_with_every_stub_in_a_fresh_kernel(written):
    """The student copy as a student runs it without solving anything: no cell raises, every check cell says
    "not done yet", and the live explorers still recompute after the exercises. Catches a stub that raises
    when its cell runs, a check that fails or passes on a stub, a later cell that needs a name only a solution
    defines, and a stub that replaces a function an explorer calls (the drive at the end would fail)."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(written / SMOKE, as_version=4)
    teacher = json.loads((ROOT / "book" / SMOKE).read_text())["cells"]
    n_explorers = sum(s.count("live_explorer(") for s in _code(teacher))
    assert n_explorers >= 1
    nb.cells.append(nbformat.v4.new_code_cell(
        "from sapo_lab.viz.explore import drive_live_explorers\n"
        f"print(len(drive_live_explorers(expected={n_explorers})))"))
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "book")}})
    client.execute()  # raises CellExecutionError, naming the cell, at the first cell that fails

    def printed(cell):
        return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")

    checks = [c for c in nb.cells if "check" in c.metadata.get("tags", [])]
    assert len(checks) >= 2
    def judged(cell):  # the line that names what the check judges
        return next((line for line in cell.source.splitlines() if "check(" in line or "answered(" in line),
                    cell.source[:60])

    silent = [judged(c) for c in checks if "not done yet" not in printed(c)]
    assert not silent, f"check cells that did not say 'not done yet' on the stubs: {silent}"
    assert int(printed(nb.cells[-1])) >= n_explorers
