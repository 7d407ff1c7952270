"""Every coded exercise's check grades the way a student meets it: "not done yet" on the stub, a pass on the
solution and on every other right answer, and a failure naming the mistake on every registered wrong answer.

The static tests need no kernel: every coded solution has a check cell and at least one wrong answer; each core
chapter (2-10) has at least two coded exercises, 20 in all, each with two right answers besides the solution and
two wrong answers whose message is registered; no assert in a check cell lacks a message. The slow test executes
each teacher notebook in a kernel, as nbval does, up to its last check. At each solution cell it snapshots the
kernel's globals and, for the stub (``tools/make_student.py``'s), every right answer and every wrong answer, runs
that variant, then the check, then restores the snapshot; then it runs the solution and the check as the notebook
has them. An exercise with its own stub must print "not done yet" and raise nothing (the student notebook goes on);
the generic stub must fail. A wrong answer must run and then fail the check with an AssertionError or
CheckFailed whose message holds the registered words. Cells that only show something (``hide-input`` cells that
bind no name a later source reads and change nothing later cells see, ``_exercises.display_only_cells``) are left
out: they cannot change what a check sees, and the executed book build runs them. Catches a check that passes on a
value left from an earlier cell, a check that only tests a shape, a wrong answer that is really right, a check
that rejects a right answer written differently (float32, another formula, K = 2's equality case), and a message
that names the wrong mistake.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from _exercises import BOOK, ROOT, display_only_cells, exercises, notebooks_with_exercises

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
            assert {"mistake", "source"} <= set(w) <= {"mistake", "source", "message"}, e.label
            assert w["mistake"] and w["source"].strip(), e.label


CORE = tuple(f"{n:02d}_" for n in range(2, 11))


def test_every_core_chapter_has_two_coded_exercises_each_tried_with_right_and_wrong_answers():
    """Catches a core chapter left without practice, and an exercise whose check was never tried on another right
    answer or on a named mistake."""
    core = [e for e in ALL if e.notebook.startswith(CORE)]
    per_chapter = {prefix: sum(e.notebook.startswith(prefix) for e in core) for prefix in CORE}
    assert all(n >= 2 for n in per_chapter.values()), per_chapter
    assert len(core) >= 20, len(core)
    thin = [f"{e.notebook} {e.label}: {len(e.right)} right, {len([w for w in e.wrong if w.get('message')])} named"
            for e in core if len(e.right) < 2 or len([w for w in e.wrong if w.get("message")]) < 2]
    assert not thin, thin


def test_no_assert_in_a_check_cell_lacks_a_message():
    """A bare ``assert x`` prints only "AssertionError": the student learns that something is wrong, never what."""
    import ast

    bare = []
    for path in sorted(BOOK.glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] != "code" or "check" not in cell["metadata"].get("tags", []):
                continue
            tree = ast.parse("".join(cell["source"]))
            bare += [f"{path.name} cell {i} line {node.lineno}" for node in ast.walk(tree)
                     if isinstance(node, ast.Assert) and node.msg is None]
    assert not bare, bare


def test_no_check_cell_is_hidden_from_the_student():
    for p in NOTEBOOKS:
        cells = json.loads(p.read_text())["cells"]
        for e in exercises(p):
            assert not make_student.is_solution(cells[e.check]), f"{e.label}: its check is a solution cell"


def _notebook(tmp_path, cells):
    """A notebook file of (tags, source) code cells after one exercise's opening; a source may be a
    (source, wrong answer) pair, the solution's."""
    opening = {"cell_type": "markdown", "metadata": {}, "source": "```{exercise-start}\n:label: ex-demo\n```"}
    code = []
    for tags, source in cells:
        source, wrong = source if isinstance(source, tuple) else (source, None)
        meta = {"tags": tags, **({"wrong_answers": [{"mistake": "m", "source": wrong}]} if wrong else {})}
        code.append({"cell_type": "code", "metadata": meta, "source": source, "outputs": [],
                     "execution_count": None})
    path = tmp_path / "demo.ipynb"
    path.write_text(json.dumps({"cells": [opening, *code], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_only_cells_that_change_nothing_a_check_sees_are_left_out(tmp_path):
    """Each kept cell below is one mistake the analysis could make; a kept cell left out would let the grading
    test run a check on a notebook state the student never has."""
    hidden = ["hide-input"]
    path = _notebook(tmp_path, [
        ([], "import torch\nrows = []\nx = 1\n\ndef show():\n    return w"),  # 1: setup
        (hidden, "y = x + 1\nprint(y)"),  # 2 kept: the solution reads y (liveness ignored)
        (hidden, "z = 2\nprint(z)"),  # 3 left out: the check binds z again before reading it
        (hidden, "rows.append(3)"),  # 4 kept: changes a list later cells see (in-place methods ignored)
        (hidden, "torch.manual_seed(0)"),  # 5 kept: moves the random generator (global state ignored)
        (hidden, "w = 5"),  # 6 kept: show(), defined earlier, reads w (function bodies ignored)
        (hidden, "v = 1"),  # 7 kept: the registered wrong answer reads v (answers ignored)
        (hidden, "fig = dict(a=1)\nfig['title'] = 't'\nfor t in range(2):\n    q = t"),  # 8 left out
        ([], "unread = 0"),  # 9 kept: not tagged hide-input (the tag is the author's word that it only shows)
        (["solution"], ("def f():\n    return y", "def f():\n    return v")),  # 10
        (["check"], "z = 3\nq = 0\nassert f() == y + z - 3 + q, 'f'"),  # 11
    ])
    assert display_only_cells(path) == {3, 8}
    # a stub is executed too: one reading z keeps cell 3 (catches stubs left out of the analysis)
    assert display_only_cells(path, {10: "def f():\n    return z"}) == {8}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_each_check_fails_on_the_stub_and_the_wrong_answers_and_passes_on_the_solution(path):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    by_solution = {e.solution: e for e in exercises(path)}
    last = max(e.check for e in by_solution.values())
    only_shows = display_only_cells(path, {i: make_student.stub_source(nb.cells[i]) for i in by_solution})
    # the kernel is stopped at once when the checks are done: a graceful shutdown waits about a second for nothing
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(BOOK)}},
                            shutdown_kernel="immediate")
    problems = []

    def run(source):
        """(None, output text) when ``source`` runs, else (the exception's name, its message)."""
        cell = nbformat.v4.new_code_cell(source)
        try:
            client.execute_cell(cell, 0)
        except CellExecutionError as err:
            return err.ename, str(err.evalue)
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        return None, text

    with client.setup_kernel():
        for index, cell in enumerate(nb.cells[: last + 1]):
            if cell.cell_type != "code" or index in only_shows:
                continue
            ex = by_solution.get(index)
            if ex is not None:
                check = nb.cells[ex.check].source
                stub = make_student.stub_source(nb.cells[index])
                assert run(SNAPSHOT)[0] is None
                # the student's stub: an exercise with its own stub says "not done yet" and lets the notebook go on;
                # the generic stub raises, so its check cannot pass
                run(stub)
                outcome, text = run(check)
                if stub != make_student.CODE_STUB:
                    if outcome is not None or "not done yet" not in text:
                        problems.append(f"{ex.label}: the check on the stub gives {outcome or text!r}, "
                                        "not 'not done yet'")
                elif outcome is None:
                    problems.append(f"{ex.label}: the check passes on the stub")
                assert run(RESTORE)[0] is None
                for right in ex.right:
                    ran, err = run(right["source"])
                    outcome, text = run(check) if ran is None else (ran, err)
                    if outcome is not None:
                        problems.append(f"{ex.label}: the right answer '{right['why']}' is rejected: {outcome}: "
                                        f"{text}")
                    assert run(RESTORE)[0] is None
                for w in ex.wrong:
                    ran, err = run(w["source"])
                    if ran is not None:
                        problems.append(f"{ex.label}: wrong answer '{w['mistake']}' raises {ran} itself: {err}")
                    outcome, text = run(check)
                    if outcome is None:
                        problems.append(f"{ex.label}: the check passes on wrong answer '{w['mistake']}'")
                    elif outcome not in ("AssertionError", "CheckFailed"):
                        problems.append(f"{ex.label}: the check crashes ({outcome}) on '{w['mistake']}'")
                    elif w.get("message") and w["message"] not in text:
                        problems.append(f"{ex.label}: on '{w['mistake']}' the check says {text!r}, without "
                                        f"{w['message']!r}")
                    assert run(RESTORE)[0] is None
            client.execute_cell(cell, index)  # the notebook's own cell: the solution and its check must pass
    assert not problems, "\n".join(problems)
