"""``make venv`` refuses a Python older than the pinned environment needs in one line, and ``make help`` names
only targets the Makefile has. Run with make in a scratch folder holding a copy of the Makefile, so nothing is
installed."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")

FAKE_OLD_PYTHON = """#!/bin/sh
# answers as a Python 3.10 would: its version, and False to the version check
if [ "$1" = -V ]; then echo "Python 3.10.12"; exit 0; fi
echo False
"""


def _scratch(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for name in ("requirements.txt", "pyproject.toml"):
        (tmp_path / name).write_text("")
    return tmp_path


def _outside_make() -> dict:
    """The environment of a user's shell: under `make test` the parent's MAKEFLAGS would make this make print
    "Entering directory" lines, which a user typing `make venv` never sees."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}


def test_an_old_python_is_refused_in_one_line(tmp_path):
    # catches the check missing (pip's long resolver error about transformers instead), a check that passes 3.10,
    # and a message that does not say which Python it found or how to choose another
    folder = _scratch(tmp_path)
    fake = folder / "python3.10"
    fake.write_text(FAKE_OLD_PYTHON)
    fake.chmod(0o755)
    done = subprocess.run(["make", "venv", f"PYTHON={fake}"], cwd=folder, capture_output=True, text=True, timeout=60,
                          env=_outside_make())
    said = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode != 0 and len(said) == 1, said
    assert "needs Python 3.11 or newer" in said[0] and "Python 3.10.12" in said[0] and "PYTHON=" in said[0]
    assert not (folder / ".venv").exists()


def test_help_lists_targets_that_exist(tmp_path):
    # catches a help line for a target renamed or removed, and help missing the three first commands
    folder = _scratch(tmp_path)
    done = subprocess.run(["make", "help"], cwd=folder, capture_output=True, text=True, timeout=60,
                          env=_outside_make())
    listed = re.findall(r"^make (\S+)", done.stdout, re.M)
    assert done.returncode == 0 and {"venv", "book", "test", "lab"} <= set(listed), done.stdout
    makefile = (ROOT / "Makefile").read_text()
    assert all(re.search(rf"^{re.escape(t)}:", makefile, re.M) for t in listed), listed
