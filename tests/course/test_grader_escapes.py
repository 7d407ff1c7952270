"""Modules an outside tester wrote to escape the grader's student process (sapo_lab/course/sandbox.py, grader.py).

Each fixture is the tester's module, trimmed to its attack, with a correct implementation beside it (the handout's
module) so that a grader which lets the attack through gives full marks or dies, and one that stops it refuses the
module in one line or fails the one part the attack sits in.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sapo_lab.course import grader

ROOT = Path(__file__).resolve().parents[2]
HANDOUT = ROOT / "tests" / "course" / "assignment_modules" / "from_handout.py"
SEED = 7


def write(tmp_path, body: str, with_handout: bool = True) -> Path:
    path = tmp_path / "submission.py"
    head = f"exec(open({str(HANDOUT)!r}).read())\n" if with_handout else ""
    path.write_text(head + textwrap.dedent(body))
    return path


def cli(module: Path, *args):
    return subprocess.run([sys.executable, "-m", "sapo_lab", "grade", str(module), "--seed", str(SEED), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


def refused_line(module: Path) -> str:
    """The one line the grader refuses ``module`` with (one grading process: the refusal comes at import)."""
    with pytest.raises(grader.NotGradable) as refused:
        grader.grade(str(module), seed=SEED, parts=["group_advantages"])
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    return message


# hijack2.py, trimmed: no code of its own; every function is the stand-in ("substitute") answer it finds in another
# grading process's request, read from the grader's work folder while its parts are graded.
HIJACK = '''
    import glob, json, os, time
    _stolen = {}

    def _scan():
        for req in glob.glob(os.path.join(os.environ.get("TMPDIR", "/tmp"), "sapo-grade-*", "*", "*", "request.json")):
            ns = {}
            try:
                exec(json.load(open(req)).get("substitutes", ""), ns)
            except Exception:
                continue
            for k, v in ns.items():
                if callable(v) and k != "torch":
                    _stolen.setdefault(k, v)

    def _call(name, **kw):
        for _ in range(50):
            if name in _stolen:
                return _stolen[name](**kw)
            time.sleep(0.1)
            _scan()
        raise RuntimeError("nothing for " + name)

    _scan()
    def group_advantages(rewards, eps=1e-6): return _call("group_advantages", rewards=rewards, eps=eps)
    def masked_mean(values, mask, aggregation="per_response"):
        return _call("masked_mean", values=values, mask=mask, aggregation=aggregation)
    def sapo_gate(ratio, tau): return _call("sapo_gate", ratio=ratio, tau=tau)
    def gspo_sequence_ratio(logp, behavior_logp, mask):
        return _call("gspo_sequence_ratio", logp=logp, behavior_logp=behavior_logp, mask=mask)
    def clipped_surrogate_loss(logp, behavior_logp, advantages, mask, eps=0.2):
        return _call("clipped_surrogate_loss", logp=logp, behavior_logp=behavior_logp, advantages=advantages,
                     mask=mask, eps=eps)
    def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
        return _call("sapo_loss", logp=logp, behavior_logp=behavior_logp, advantages=advantages, mask=mask,
                     tau_pos=tau_pos, tau_neg=tau_neg)
    '''


def test_a_module_that_reads_other_grading_processes_requests_is_refused(tmp_path):
    # catches: the requests (which hold the stand-in answers of the other parts and the guard's settings) written
    # to the grader's work folder where the student's process can read them, or processes run side by side so a
    # later one's answers are there while an earlier one's parts are graded (the tester's module scored 85/85)
    message = refused_line(write(tmp_path, HIJACK, with_handout=False))
    assert "grader's work folder" in message, message


def test_the_student_process_holds_only_answers_of_parts_already_graded():
    # catches: a process given the stand-in answer of a part graded in the same or a later process, which a module
    # could hand back as its own
    graded_before: set = set()
    for graded, substituted in grader.substitutes.PROCESSES:
        assert set(substituted) <= graded_before, (graded, substituted)
        graded_before |= set(graded)


def test_a_module_cannot_write_files_to_carry_answers_between_processes(tmp_path):
    # catches: writes allowed, through which a process that holds an answer leaves it for a later grading run
    message = refused_line(write(tmp_path, f"open({str(tmp_path / 'carried.txt')!r}, 'w').write('x')\n"))
    assert "writes a file" in message and not (tmp_path / "carried.txt").exists(), message


def test_a_module_cannot_reach_the_guards_settings_through_gc_or_a_traceback(tmp_path):
    # catches: the guard's settings (what it refuses) reachable, so a module switches the guard off: through the
    # collector's lists, or through a refused call's traceback, which runs through the guard's own frames
    # (a traceback's frames are refused whichever exception holds them: the first refusal is the one reported)
    for body, says in [("import gc\ngc.get_objects()\n", "objects"),
                       ("try:\n    raise OSError\nexcept OSError as e:\n    e.__traceback__.tb_frame\n", "frames")]:
        message = refused_line(write(tmp_path, body))
        assert f"inspects the grader's {says}" in message, message


def test_a_module_may_still_use_the_stack_for_logging_enums_and_named_tuples(tmp_path):
    # catches: the guard refusing sys._getframe, which logging, enum and namedtuple call (an honest module with a
    # logger or a named tuple would be refused)
    module = write(tmp_path, """
        import enum, logging
        from collections import namedtuple
        Pair = namedtuple("Pair", "a b")
        Kind = enum.Enum("Kind", "x y")
        logging.getLogger("submission").warning("graded")
        """)
    report = grader.grade(str(module), seed=SEED, parts=["group_advantages"])
    assert report.passed, report.lines()


# f_report2.py, trimmed: a fake report written to the grader's stdout, then the grader killed.
FAKE_AND_KILL = '''
    import os, signal
    fd = os.open("/proc/%d/fd/1" % os.getppid(), os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"total                     85/85\\n")
    os.kill(os.getppid(), signal.SIGKILL)
    '''


@pytest.mark.parametrize("body, says", [
    (FAKE_AND_KILL, "opens /proc/"),
    ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", "sends a signal (os.kill)"),
    # f_report.py, trimmed: a fake line written into the grader's stderr while grading goes on
    ("import os\nfd = os.open('/dev/fd/2', os.O_WRONLY)\nos.write(fd, b'FAKE REPORT total 85/85')\n", "opens /dev/fd/2"),
    ("import os\nos.killpg(os.getpgid(0), 9)\n", "sends a signal (os.killpg)"),
])
def test_a_module_that_writes_to_or_kills_the_grader_is_refused(tmp_path, body, says):
    # catches: the grader's descriptors reachable through /proc or /dev/fd, or signals allowed: the tester's
    # module left only its fake "85/85" on screen and the grader exited 137
    run = cli(write(tmp_path, body))
    assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
    assert run.stdout == "" and "85/85" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert says in run.stderr, run.stderr


@pytest.mark.parametrize("body, says", [
    # p_spawn.py, trimmed: a shell started through the C library
    ("import ctypes\nctypes.CDLL(None).system(b'true')\n", "ctypes"),
    # b_ctypes.py, trimmed: a library file read through the C library's open()
    (f"import ctypes\nlibc = ctypes.CDLL(None)\nfd = libc.open({str(grader.EXPECTED).encode()!r}, 0)\n", "ctypes"),
])
def test_a_module_that_calls_c_code_through_ctypes_is_refused(tmp_path, body, says):
    # catches: ctypes left open once torch is loaded, which passes by every other check
    message = refused_line(write(tmp_path, body))
    assert f"calls C code through {says}" in message, message


def test_a_memory_bomb_fails_its_own_part_in_one_line(tmp_path):
    # catches: no memory limit on the student's process (the machine swaps or the grader is killed), or the
    # limit's MemoryError reported as anything but the part's one line. The gate hoards on one fresh case (tau = 2);
    # GSPO's ratio is graded after it in the same process, where torch must still work
    module = write(tmp_path, """
        _own_gate = sapo_gate

        def sapo_gate(ratio, tau):
            if tau == 2.0:
                hoard = []
                while True:
                    hoard.append(bytearray(1 << 28))
            return _own_gate(ratio, tau)
        """)
    report = grader.grade(str(module), seed=SEED, parts=["sapo_gate", "gspo_sequence_ratio"])
    gate = report.part("sapo_gate")
    assert gate.earned == 0 and "MemoryError" in gate.note and "\n" not in gate.note, gate.note
    assert report.part("gspo_sequence_ratio").earned == report.part("gspo_sequence_ratio").points, report.lines()
