"""Every coded exercise's check grades: it fails on the student's stub and on each registered wrong answer,
and passes on the solution.

The static test needs no kernel: every coded solution has a check cell and at least one wrong answer. The
slow test executes each teacher notebook in a kernel, as nbval does, up to its last check. At each solution
cell it snapshots the kernel's globals and, for the stub (``tools/make_student.py``'s) and for every wrong
answer, runs that variant, then the check, then restores the snapshot; then it runs the solution and the
check as the notebook has them. A check must fail on the stub (any error: the names are undefined or stale)
and fail on a wrong answer with an AssertionError (not a crash: the wrong answer itself must run), so it
catches the mistake it is registered for. Catches a check that passes on a value left from an earlier cell,
a check that only tests a shape, and a wrong answer that is really right.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from _exercises import BOOK, ROOT, exercises, notebooks_with_exercises

spec = importlib.util.spec_from_file_location("make_student", ROOT / "tools" / "make_student.py")
make_student = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_student)

NOTEBOOKS = notebooks_with_exercises()
ALL = [e for p in NOTEBOOKS for e in exercises(p)]

# the harness's own names stay out of the snapshot: a snapshot holding the previous one would restore the
# previous exercise's globals from the second variant on (dropping cells run since, such as a setup cell)
SNAPSHOT = '__exercise_ns__ = {k: v for k, v in globals().items() if not k.startswith("__exercise_")}'
RESTORE = """__exercise_keep__ = __exercise_ns__
for __k in list(globals()):
    if __k not in __exercise_keep__ and not __k.startswith("__exercise_"):
        del globals()[__k]
globals().update(__exercise_keep__)"""


def test_every_coded_exercise_has_a_check_and_a_registered_wrong_answer():
    assert len(ALL) >= 25
    missing = [f"{e.notebook} {e.label}: {what}" for e in ALL
               for what, bad in (("no check cell", e.check is None), ("no wrong answer", not e.wrong)) if bad]
    assert not missing, missing
    for e in ALL:
        for w in e.wrong:
            assert set(w) == {"mistake", "source"} and w["mistake"] and w["source"].strip(), e.label


def test_no_check_cell_is_hidden_from_the_student():
    for p in NOTEBOOKS:
        cells = json.loads(p.read_text())["cells"]
        for e in exercises(p):
            assert not make_student.is_solution(cells[e.check]), f"{e.label}: its check is a solution cell"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_check_fails_on_the_stub_and_the_wrong_answers_and_passes_on_the_solution(path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    by_solution = {e.solution: e for e in exercises(path)}
    last = max(e.check for e in by_solution.values())
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(BOOK)}})
    problems = []

    def run(source):
        """None when ``source`` runs, else the exception's name."""
        try:
            client.execute_cell(nbformat.v4.new_code_cell(source), 0)
        except CellExecutionError as err:
            return err.ename
        return None

    with client.setup_kernel():
        for index, cell in enumerate(nb.cells[: last + 1]):
            if cell.cell_type != "code":
                continue
            ex = by_solution.get(index)
            if ex is not None:
                check = nb.cells[ex.check].source
                variants = [("the stub", make_student.CODE_STUB, False)]
                variants += [(f"wrong answer '{w['mistake']}'", w["source"], True) for w in ex.wrong]
                assert run(SNAPSHOT) is None
                for name, source, must_run in variants:
                    ran = run(source)
                    if must_run and ran is not None:
                        problems.append(f"{ex.label}: {name} raises {ran} itself")
                    outcome = run(check)
                    if outcome is None:
                        problems.append(f"{ex.label}: the check passes on {name}")
                    elif must_run and outcome != "AssertionError":
                        problems.append(f"{ex.label}: the check crashes ({outcome}) on {name}")
                    assert run(RESTORE) is None
            client.execute_cell(cell, index)  # the notebook's own cell: the solution and its check must pass
    assert not problems, "\n".join(problems)
