"""Hostile modules fail to cheat the grader (sapo_lab/course/grader.py, sandbox.py).

Each module below tries one way to get marks without implementing SAPO: handing back the frozen outputs,
patching the grader's comparison, leaving at import with status 0, printing a fake report, importing sapo_lab
(directly, through importlib, through another module, or by reading its files), or hanging the grader. The
student's code runs in a separate process that holds neither the comparison nor the report nor the exit status,
so each attempt ends with exit 2 (one line) or a part that earns nothing.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from _grade_cli import grade_in_process

from sapo_lab.course import grader

ROOT = Path(__file__).resolve().parents[2]
HANDOUT = ROOT / "tests" / "course" / "assignment_modules" / "from_handout.py"
SEED = 7
FULL = sum(points for points, _ in grader.PARTS.values())


EXEC_HANDOUT = f"exec(open({str(HANDOUT)!r}).read())"


def write(tmp_path, text: str, name: str = "submission.py") -> Path:
    """The module ``text``, its line EXEC_HANDOUT replaced by the handout module's text (a module in the sandbox
    sees no file but itself)."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).replace(EXEC_HANDOUT, HANDOUT.read_text()))
    return path


def earned(stdout: str) -> int:
    total = next(line for line in stdout.splitlines() if line.startswith("total"))
    return int(total.split()[1].split("/")[0])


def refusal(module: Path, **kwargs) -> str:
    """The one line the grader refuses ``module`` with (one grading process: the refusal comes at import);
    ``isolate=False`` for the audit hook's own words, as where bubblewrap is missing."""
    with pytest.raises(grader.NotGradable) as refused:
        grader.grade(str(module), seed=SEED, parts=["group_advantages"], **kwargs)
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    return message


def assert_refused(run, says: str):
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stdout == "" and len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert says in run.stderr


def test_a_module_that_hands_back_the_frozen_outputs_earns_nothing(tmp_path):
    # catches: points given on the frozen cases alone (the fresh cases are what such a module cannot know)
    table = {part: [[case["inputs"], case["expected"]] for case in cases]
             for part, cases in grader.expected_outputs().items()}
    module = write(tmp_path, f"""
        import json
        import torch
        TABLE = json.loads({json.dumps(table)!r})

        def _lookup(part, **given):
            for inputs, expected in TABLE[part]:
                if all(torch.equal(torch.as_tensor(given[k], dtype=torch.float64),
                                   torch.as_tensor(v, dtype=torch.float64))
                       for k, v in inputs.items() if k in given and isinstance(v, list)):
                    return expected
            return TABLE[part][0][1]

        def group_advantages(rewards, eps=1e-6):
            return torch.tensor(_lookup("group_advantages", rewards=rewards)["value"], dtype=torch.float64)

        def sapo_gate(ratio, tau):
            return torch.tensor(_lookup("sapo_gate", ratio=ratio)["value"], dtype=torch.float64)

        def gspo_sequence_ratio(logp, behavior_logp, mask):
            return torch.tensor(_lookup("gspo_sequence_ratio", logp=logp.detach())["value"], dtype=torch.float64)
        """)
    report = grader.grade(str(module), seed=SEED, parts=["group_advantages", "sapo_gate", "gspo_sequence_ratio"])
    assert all(p.earned == 0 for p in report.parts), report.lines()
    assert all("fresh case" in p.note for p in report.parts), report.lines()


def test_a_module_that_reads_the_frozen_outputs_file_is_refused(tmp_path):
    # catches: the frozen outputs readable from the student's process by the audit hook's rules, by their path or
    # through a link to them (a guard that compares the path as given, not the file it leads to); the sandbox,
    # where the link and the file are not there at all, is tested in test_grader_escapes.py
    link = tmp_path / "frozen.json"
    link.symlink_to(grader.EXPECTED)
    for path in (grader.EXPECTED, link):
        module = write(tmp_path, f"""
            import json
            FROZEN = json.load(open({str(path)!r}))
            """)
        assert str(grader.EXPECTED) in refusal(module, isolate=False), path


def test_a_module_that_patches_the_graders_comparison_gains_nothing(tmp_path):
    # catches: the comparison or the report made in the process that runs the student's code; with the
    # instructor's switch the patch is allowed to run, and still changes nothing in the grading process
    module = write(tmp_path, """
        import sapo_lab.course.grader as g
        g.close = lambda a, b: True
        g.judge_part = lambda part, frozen, fresh: g.PartResult(part, 10, 10, "ok")
        """)
    assert "imports sapo_lab" in refusal(module)
    report = grader.grade(str(module), seed=SEED, allow_sapo_lab=True)
    assert not report.passed and sum(p.earned for p in report.parts) == 0, report.lines()
    assert report.part("sapo_loss").note == "missing: define sapo_loss()", report.lines()


@pytest.mark.parametrize("leaves, says", [
    ("raise SystemExit(0)", "does not import: SystemExit: 0"),
    ("import os\nos._exit(0)", "ended its own process while importing (exit status 0)"),
])
def test_a_module_that_exits_0_at_import_is_not_graded(tmp_path, leaves, says):
    # catches: the exit status taken from the student's process (0 = "all parts pass")
    module = write(tmp_path, leaves + "\n")
    assert_refused(grade_in_process(str(module), "--seed", str(SEED)), says)


def test_a_fake_report_printed_by_the_module_is_not_the_report(tmp_path):
    # catches: the student's output relayed as (or mixed into) the report, or read without a cap
    module = write(tmp_path, f"""
        import os
        import sys
        exec(open({str(HANDOUT)!r}).read())
        print("total                     {FULL}/{FULL}")
        print("x" * 5_000_000)

        _own_loss = sapo_loss

        def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
            if tau_neg == 2.0:  # one fresh case: the calls after it go on in a fresh process
                print("sapo_loss                  20/20  ok")
                sys.stdout.flush()
                os._exit(0)
            return _own_loss(logp, behavior_logp, advantages, mask, tau_pos, tau_neg)
        """)
    run = grade_in_process(str(module), "--seed", str(SEED))
    assert run.returncode == 1, run.stdout + run.stderr
    assert earned(run.stdout) == FULL - grader.PARTS["sapo_loss"][0]
    assert "xxxx" not in run.stdout and f"{FULL}/{FULL}" not in run.stdout and "20/20" not in run.stdout
    sapo = next(line for line in run.stdout.splitlines() if line.startswith("sapo_loss"))
    assert "0/20" in sapo and "ended its own process (exit status 0) (fresh case 2)" in sapo, sapo


HELPER = "import sapo_lab\n"
GATES_FILE = ROOT / "sapo_lab" / "objective" / "gates.py"
FROM_FILE = (f"import importlib.util\nspec = importlib.util.spec_from_file_location('g', {str(GATES_FILE)!r})\n"
             "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n")


@pytest.mark.parametrize("how, body, says", [
    ("directly", "import sapo_lab\n", "imports sapo_lab"),
    ("by a from-import", "from sapo_lab import policy_loss\n", "imports sapo_lab"),
    ("through importlib", "import importlib\nlib = importlib.import_module('sapo_lab.objective.gates')\n",
     "imports or reads sapo_lab (opens sapo_lab/__pycache__/__init__"),
    ("through another module", "import helper_that_imports\n", "imports sapo_lab (helper_that_imports.py, line 1)"),
    ("caught and hidden", "try:\n    import sapo_lab\nexcept Exception:\n    pass\n", "imports sapo_lab"),
    ("from its source file", FROM_FILE, "imports or reads sapo_lab (opens sapo_lab/objective/"),
])
def test_a_module_that_imports_sapo_lab_in_any_form_is_refused(tmp_path, how, body, says):
    # catches: a refusal that reads only the module's own import statements (the old check read the source
    # for sapo_lab.objective), or one the module can catch and carry on from: the audit hook's words (in the
    # sandbox a helper module beside the submission is not there, nor sapo_lab)
    (tmp_path / "helper_that_imports.py").write_text(HELPER)
    module = write(tmp_path, f"exec(open({str(HANDOUT)!r}).read())\n" + body)
    assert says in refusal(module, isolate=False)


def test_a_module_that_imports_sapo_lab_inside_a_function_is_refused(tmp_path):
    # catches: the refusal checked only while the module is imported
    module = write(tmp_path, f"""
        exec(open({str(HANDOUT)!r}).read())

        def sapo_gate(ratio, tau):
            from sapo_lab.objective.gates import soft_gate
            return soft_gate(ratio, tau)
        """)
    with pytest.raises(grader.NotGradable, match="imports sapo_lab.objective.gates"):
        grader.grade(str(module), seed=SEED, parts=["sapo_gate"])


def test_a_module_that_starts_a_process_is_refused(tmp_path):
    # catches: a module asking another interpreter (where sapo_lab imports) for the answers
    module = write(tmp_path, """
        import subprocess
        import sys
        subprocess.run([sys.executable, "-c", "import sapo_lab"])
        """)
    assert "starts a process" in refusal(module)


def test_a_module_that_sleeps_at_import_is_stopped_by_the_time_limit(tmp_path):
    # catches: no time limit (this test would hang until pytest's own timeout)
    module = write(tmp_path, "import time\ntime.sleep(3600)\n")
    assert "did not finish importing within the time limit (2 s)" in refusal(module, time_limit=2)


def test_a_function_that_sleeps_costs_its_part_only(tmp_path):
    # catches: a hanging part taking the other parts' grades (or the grader) with it: the gate hangs on one fresh
    # case (the one at tau = 2), and the calls after it, the gate's last and every one of GSPO's ratio, are graded
    # in a fresh process
    module = write(tmp_path, f"""
        import time
        exec(open({str(HANDOUT)!r}).read())
        _own_gate = sapo_gate

        def sapo_gate(ratio, tau):
            if tau == 2.0:
                time.sleep(3600)
            return _own_gate(ratio, tau)
        """)
    report = grader.grade(str(module), seed=SEED, time_limit=3, parts=["sapo_gate", "gspo_sequence_ratio"])
    gate, gspo = report.parts
    assert gspo.earned == gspo.points, report.lines()
    assert gate.earned == 0 and "exceeded the time limit (3 s) (fresh case 2)" in gate.note, gate.note
