"""One-line messages for what an outside tester handed the grader by mistake, and mistakes the handout warns about
named in the report (sapo_lab/course/grader.py, sandbox.py; assignment/cs336_adapters.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sapo_lab.course import grader

ROOT = Path(__file__).resolve().parents[2]
HANDOUT = ROOT / "tests" / "course" / "assignment_modules" / "from_handout.py"
SEED = 7


def write(tmp_path, body: str, name: str = "submission.py") -> Path:
    path = tmp_path / name
    path.write_text(HANDOUT.read_text() + "\n" + textwrap.dedent(body))  # one file: a sandbox shows no other
    return path


def not_gradable(path, **kwargs) -> str:
    with pytest.raises(grader.NotGradable) as caught:
        grader.grade(str(path), **kwargs)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    return message


def test_a_folder_is_called_a_folder(tmp_path):
    # catches: "no such file" for a folder that exists (the tester ran `grade .`)
    assert "is a folder" in not_gradable(tmp_path, seed=SEED)


def test_a_file_that_is_not_a_py_module_is_called_so(tmp_path):
    # catches: "'NoneType' object has no attribute 'loader'" for good.txt
    path = tmp_path / "good.txt"
    path.write_text(HANDOUT.read_text())
    assert "is not a .py module" in not_gradable(path, seed=SEED)


def test_a_seed_out_of_range_names_the_seed_flag():
    # catches: an OverflowError from the generator, naming no flag
    run = subprocess.run([sys.executable, "-m", "sapo_lab", "grade", str(HANDOUT), "--seed",
                          "99999999999999999999999"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 2 and run.stdout == "" and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "--seed must be an integer from 0 to" in run.stderr and "Traceback" not in run.stderr


def test_a_part_that_is_not_a_function_is_called_so(tmp_path):
    # catches: "missing: define group_advantages()" for a module that does define the name, as a number
    report = grader.grade(str(write(tmp_path, "group_advantages = 5\n")), seed=SEED, parts=["group_advantages"])
    note = report.part("group_advantages").note
    assert note == "not a function: group_advantages is an int; define group_advantages() with def", note


@pytest.mark.parametrize("body, named", [
    # v_mm_divT.py, trimmed: each response's sum divided by T, the token pool right
    ("""
     def masked_mean(values, mask, aggregation="per_response"):
         m = mask.to(values.dtype)
         if aggregation == "per_response":
             return ((values * m).sum(dim=1) / values.shape[1]).mean()
         return (values * m).sum() / m.sum()
     """, "wrong per_response; most likely mistake: padding counted in the denominator"),
    # v_plainmean.py, trimmed
    ("""
     def masked_mean(values, mask, aggregation="per_response"):
         return values.mean()
     """, "wrong; most likely mistake: the mask left out: a plain mean averages the padding in"),
])
def test_the_masked_mean_mistakes_the_handout_warns_about_are_named(tmp_path, body, named):
    # catches: a mistake matched only when every output is wrong the same way (the tester's divided-by-T module,
    # right on the token pool, read "wrong at per_response"), or values.mean() not among the named mistakes
    report = grader.grade(str(write(tmp_path, body)), seed=SEED, parts=["masked_mean"])
    note = report.part("masked_mean").note
    assert note.startswith(named) and "(matches" not in note, note


def test_the_cs336_adapters_name_a_missing_assignment_variable(monkeypatch):
    # catches: a bare FileNotFoundError from importlib for SAPO_ASSIGNMENT=/nonexist.py
    monkeypatch.setenv("SAPO_ASSIGNMENT", "/nonexist.py")
    spec = importlib.util.spec_from_file_location("cs336_adapters_missing", ROOT / "assignment" / "cs336_adapters.py")
    adapters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapters)
    with pytest.raises(FileNotFoundError, match=r"^SAPO_ASSIGNMENT=/nonexist.py: no such file"):
        adapters.student()
