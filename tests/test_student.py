"""Student notebooks (tools/make_student.py): stubs where solutions were, checks kept, teacher unchanged."""

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
            assert make_student.is_stub(s), "a solution cell survived into the student notebook"
            assert "".join(s["source"]) != "".join(t["source"])
        else:
            assert s == t, "a non-solution cell changed"
    checks = [c for c in student["cells"] if "check" in c["metadata"].get("tags", [])]
    assert all("assert " in "".join(c["source"]) for c in checks)


@pytest.mark.slow
@pytest.mark.parametrize("path", TEACHER, ids=lambda p: p.name)
def test_student_notebook_runs_up_to_its_first_stub(written, path):
    """Every cell before the first stub runs; the stub itself stops with NotImplementedError."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(written / path.name, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if make_student.is_stub(c))
    nb.cells = nb.cells[: first + 1]
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "book")}})
    with pytest.raises(CellExecutionError) as failure:
        client.execute()
    assert "NotImplementedError" in str(failure.value) and "your code here" in str(failure.value)
    assert nb.cells[first].outputs and nb.cells[first].outputs[-1].get("ename") == "NotImplementedError", \
        "the notebook failed before reaching its first stub"
