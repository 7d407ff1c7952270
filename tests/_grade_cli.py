"""``grade_in_process``: the grade command run in the test's own process, for tests about the grading rather than
the entry point (the student's code still runs in the grader's child processes, as under the command)."""

from __future__ import annotations

import contextlib
import io
from types import SimpleNamespace

from sapo_lab.cli import main


def grade_in_process(*args) -> SimpleNamespace:
    """The exit status, stdout and stderr of ``python -m sapo_lab grade ARGS``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(["grade", *args])
        except SystemExit as exc:
            status = exc.code
    return SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())
