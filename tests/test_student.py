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


# Run inside the notebook's kernel after the cells before the first stub: change every control of every live
# explorer (sapo_lab.viz.explore.LIVE_EXPLORERS) and check that the callback ran again, with the new value, without
# an error and with a different result or output; then put the control back.
DRIVE_EXPLORERS = r"""
import json
from sapo_lab.viz.explore import LIVE_EXPLORERS

_report = []
for _ex in LIVE_EXPLORERS:
    assert _ex.error is None and _ex.calls >= 1, (_ex.name, _ex.error, _ex.calls)
    for _control in _ex.widget.kwargs_widgets:
        _name, _old = _control._kwarg, _control.value
        if hasattr(_control, "max"):                                    # sliders: jump to an end
            _new = _control.max if _old != _control.max else _control.min
        elif hasattr(_control, "options"):                              # dropdowns, toggle buttons
            _values = [o[1] if isinstance(o, tuple) else o for o in _control.options]
            _new = next(v for v in _values if v != _old)
        else:                                                           # checkboxes
            _new = not _old
        _calls, _before = _ex.calls, repr(_ex.last_result)
        _control.value = _new
        assert _ex.calls == _calls + 1, f"{_ex.name}: changing {_name} did not recompute"
        assert _ex.error is None, f"{_ex.name}({_name}={_new}): {_ex.error}"
        assert _ex.last_kwargs[_name] == _control.value
        # explorers that return their numbers must return different ones (plot-only explorers return None)
        _report.append(dict(explorer=_ex.name, control=_name, returns=_ex.last_result is not None,
                            changed=repr(_ex.last_result) != _before))
        _control.value = _old
print("DRIVEN " + json.dumps(_report))
"""


def _execute_up_to_first_stub(path, written):
    """Execute the student notebook's cells before the first stub, drive its live explorers, then run the stub."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(written / path.name, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if make_student.is_stub(c))
    stub = nb.cells[first]
    nb.cells = nb.cells[:first] + [nbformat.v4.new_code_cell(DRIVE_EXPLORERS)]
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "book")}})
    stub_error = None
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)                      # raises CellExecutionError on the first failure
        if stub.cell_type == "code":
            nb.cells.append(stub)
            try:
                client.execute_cell(stub, len(nb.cells) - 1)
            except CellExecutionError as failure:
                stub_error = str(failure)
    text = "".join(o.get("text", "") for o in nb.cells[first].outputs if o.get("output_type") == "stream")
    driven = json.loads(text.split("DRIVEN ", 1)[1])
    return stub, stub_error, driven


@pytest.mark.slow
@pytest.mark.parametrize("path", TEACHER, ids=lambda p: p.name)
def test_student_notebook_runs_up_to_its_first_stub_and_its_live_explorers_recompute(written, path):
    stub, stub_error, driven = _execute_up_to_first_stub(path, written)
    if stub.cell_type == "code":
        assert stub_error and "NotImplementedError" in stub_error and "your code here" in stub_error
    # every live explorer of the chapter sits before its exercises, and each control was driven
    teacher_code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    n_explorers = sum("".join(c["source"]).count("live_explorer(") for c in teacher_code)
    assert len({d["explorer"] for d in driven}) == n_explorers, driven
    assert all(d["changed"] for d in driven if d["returns"]), driven
    if path.name.startswith(("09_", "11_")):          # the two explorers that return their numbers
        assert any(d["returns"] for d in driven), driven
