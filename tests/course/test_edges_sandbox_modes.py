"""Every open mode that can create or change a file counts as a write in the grader's sandbox."""
from pathlib import Path

import pytest

from sapo_lab.course import grader

HANDOUT = Path(__file__).resolve().parent / "assignment_modules" / "from_handout.py"


def _refusal(tmp_path, body: str) -> str:
    module = tmp_path / "submission.py"
    module.write_text(HANDOUT.read_text() + "\n" + body)
    with pytest.raises(grader.NotGradable) as refused:  # the audit hook's own words: no bubblewrap needed
        grader.grade(str(module), seed=7, parts=["group_advantages"], isolate=False)
    return str(refused.value)


@pytest.mark.parametrize("mode", ["x", "xb", "a", "r+"])
def test_each_mode_that_writes_is_refused(tmp_path, mode):
    """Catches a write mode left out of the hook's list: 'x' (exclusive create) makes a new file as 'w' does,
    so a module could leave an answer for a later grading process."""
    target = tmp_path / f"carried_{mode.replace('+', 'plus')}.txt"
    if "r" in mode:
        target.write_text("kept")  # r+ needs an existing file
    message = _refusal(tmp_path, f"open({str(target)!r}, {mode!r}).close()\n")
    assert "writes a file" in message, message
    assert not target.exists() or target.read_text() == "kept"
