"""Modules an outside tester wrote to escape the grader's student process (sapo_lab/course/sandbox.py, grader.py).

Each fixture is the tester's module, trimmed to its attack, with a correct implementation beside it (the handout's
module) so that a grader which lets the attack through gives full marks or dies, and one that stops it refuses the
module in one line or fails the one part the attack sits in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from sapo_lab.course import grader, isolation, student_messages

ROOT = Path(__file__).resolve().parents[2]
HANDOUT = ROOT / "tests" / "course" / "assignment_modules" / "from_handout.py"
SEED = 7


def write(tmp_path, body: str, with_handout: bool = True) -> Path:
    path = tmp_path / "submission.py"
    head = HANDOUT.read_text() + "\n" if with_handout else ""  # one file: a sandbox shows no other
    path.write_text(head + textwrap.dedent(body))
    return path


def cli(module: Path, *args):
    return subprocess.run([sys.executable, "-m", "sapo_lab", "grade", str(module), "--seed", str(SEED), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


def refused_line(module: Path, isolate: bool = True) -> str:
    """The one line the grader refuses ``module`` with (one grading process: the refusal comes at import);
    ``isolate=False`` for the audit hook's own words, as where bubblewrap is missing."""
    with pytest.raises(grader.NotGradable) as refused:
        grader.grade(str(module), seed=SEED, parts=["group_advantages"], isolate=isolate)
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
    # later one's answers are there while an earlier one's parts are graded (the tester's module scored 85/85).
    # The audit hook's rule: in the sandbox the grader's work folders are not there at all
    message = refused_line(write(tmp_path, HIJACK, with_handout=False), isolate=False)
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


# ---- the operating system's boundary (sapo_lab/course/isolation.py) -----------------------------------------
needs_sandbox = pytest.mark.skipif(not isolation.sandbox_status().isolated,
                                   reason=f"no sandbox here: {isolation.sandbox_status().why}")


def test_where_bubblewrap_is_installed_the_grader_isolates():
    # catches: a sandbox that no longer starts (a mount of a path that is missing, a flag this bwrap lacks) and
    # so falls back, on every machine that has bubblewrap, to the audit hook alone: CI installs bubblewrap
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed here")
    status = isolation.probe_sandbox()  # whatever SAPO_LAB_GRADE_NO_SANDBOX says
    assert status.isolated, status.why


def test_the_sandbox_binds_no_part_of_the_checkout_but_site_packages():
    # catches: the checkout (or a folder above it) bound into the sandbox, which shows the tests' correct
    # modules and the frozen outputs, or a whole site-packages folder (every package installed there importable);
    # with --allow-sapo-lab the package alone, never the tests or assignment/
    for allow in (False, True):
        args = isolation.mounts("/nonexistent-submission", allow_sapo_lab=allow)
        sources = [args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"]
        for source in sources:
            inside = Path(source).resolve()
            assert not (ROOT == inside or ROOT.is_relative_to(inside)), source
            if inside.is_relative_to(ROOT):
                allowed = {*isolation.site_entries(), str(isolation.HARNESS)} | ({str(isolation.PACKAGE_DIR)} if allow
                                                                                  else set())
                assert source in allowed, source


# the first two attacks together: the audit hook switched off at import, then every way out tried. The
# module raises one line naming what it reached; in the sandbox it reaches nothing.
GUARD_OFF = '''
    import glob, os, socket, sys
    sys.modules["__main__"].Guard.__call__ = lambda self, event, args: None
    reached = []
    for label, path in {paths!r}:
        if os.path.exists(path):
            reached.append(label)
    if sorted(os.listdir(os.path.dirname(os.path.abspath(__file__)))) != [os.path.basename(__file__)]:
        reached.append("other-files")
    if glob.glob({work!r}):
        reached.append("work-folders")
    for name in ("sapo_lab", "transformers", "pytest"):  # of site-packages, only torch, numpy and their needs
        try:
            __import__(name)
            reached.append(name)
        except ImportError:
            pass
    try:
        if os.fork() == 0:
            os._exit(0)
        reached.append("fork")
    except OSError:
        pass
    try:
        os.kill({grader_pid}, 0)
        reached.append("signal")
    except OSError:
        pass
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1)
        reached.append("network")
    except OSError as exc:
        if not isinstance(exc, (ConnectionRefusedError, PermissionError)) and "unreachable" not in str(exc):
            reached.append("network")
    try:
        open({expected!r}, "a").close()
        reached.append("write")
    except OSError:
        pass
    for place in ("/", "/dev", "/submission", "/grader"):  # the sandbox's own root is memory without a size
        try:
            open(os.path.join(place, "left.txt"), "w").close()
            reached.append("writes-" + place)
        except OSError:
            pass
    raise RuntimeError("reached: " + " ".join(reached) + ".")
    '''


@needs_sandbox
def test_a_module_that_switches_the_guard_off_reaches_nothing_in_the_sandbox(tmp_path):
    # catches: the student's module run where the checkout is visible (the issue: the hook switched off, the
    # repository's correct module executed, 85/85), where sapo_lab imports, the grader's work folders or other
    # processes are reachable, new processes start, the network answers, a file of the checkout is writable, or
    # the sandbox's root or /dev take files without a size limit (memory the grading machine loses)
    paths = [("solutions", str(ROOT / "tests" / "course" / "assignment_modules" / "from_handout.py")),
             ("expected", str(grader.EXPECTED)), ("package", str(grader.PACKAGE_DIR / "course" / "grader.py"))]
    body = GUARD_OFF.format(paths=paths, work=f"{tempfile.gettempdir()}/sapo-grade-*", grader_pid=os.getpid(),
                            expected=str(grader.EXPECTED))
    message = refused_line(write(tmp_path, body, with_handout=False))
    assert message.endswith("does not import: RuntimeError: reached: ."), message


def test_a_write_through_os_open_of_an_existing_file_counts_as_a_write(tmp_path):
    # catches: the hook judging a write by the open mode alone (os.open passes flags, no mode) or only by
    # O_CREAT, so O_WRONLY on a file that exists would pass it (the audit hook's rule: the sandbox's mounts are
    # read-only besides)
    existing = tmp_path / "existing.txt"
    existing.write_text("kept")
    body = f"import os\nos.write(os.open({str(existing)!r}, os.O_WRONLY), b'over')\n"
    message = refused_line(write(tmp_path, body), isolate=False)
    assert "writes a file" in message and existing.read_text() == "kept", message


# Forged messages on the event pipe (its descriptor is the harness's sys.argv[1]): one a part, all in the
# process that grades the four leaf parts.
FORGED = '''
    import json, os, sys
    _events = int(sys.argv[1])
    _own = dict(group_advantages=group_advantages, sapo_gate=sapo_gate, gspo_sequence_ratio=gspo_sequence_ratio)

    def _send(record):
        os.write(_events, (record if isinstance(record, bytes) else json.dumps(record).encode()) + b"\\n")

    def group_advantages(rewards, eps=1e-6):
        _send({"event": "result", "key": ["group_advantages/frozen/0"], "outputs": {}, "meta": {}})
        return _own["group_advantages"](rewards, eps)

    def masked_mean(values, mask, aggregation="per_response"):
        raise RuntimeError("\\x1b[2K\\rmasked_mean               10/10  ok\\ntotal 85/85")

    def sapo_gate(ratio, tau):
        _send(b"not json {")
        return _own["sapo_gate"](ratio, tau)

    def gspo_sequence_ratio(logp, behavior_logp, mask):
        _send({"event": "result", "key": "update_loss/fresh/0", "error": "x"})
        return _own["gspo_sequence_ratio"](logp, behavior_logp, mask)
    '''


def test_forged_or_malformed_messages_fail_their_own_part_in_one_line(tmp_path):
    # catches: the grader trusting the student's process (the issue: one event whose key is a list crashed it with
    # "unhashable type: 'list'", exit 1, no report), a line that is not JSON skipped so the part still passes, a
    # result accepted for a call another process grades, or a student's text printed with its control characters
    # (an escape sequence that rewrites the report's lines on a terminal)
    report = grader.grade(str(write(tmp_path, FORGED)), seed=SEED, parts=list(grader.substitutes.LEAVES))
    notes = {p.part: p.note for p in report.parts}
    assert all(p.earned == 0 for p in report.parts), report.lines()
    assert "a 'result' message whose key is a list, not text" in notes["group_advantages"], notes
    assert "a line that is not JSON" in notes["sapo_gate"], notes
    assert "'update_loss/fresh/0', a call this process was not asked for" in notes["gspo_sequence_ratio"], notes
    assert notes["masked_mean"].startswith("raises RuntimeError: ?[2K"), notes  # its first line, escape disarmed
    assert all(n.isprintable() for line in report.lines() for n in line), report.lines()


@pytest.mark.parametrize("line, says", [
    (b'{"event": "result", "key": ["k"], "outputs": {}, "meta": {}}', "key is a list"),
    (b'[1, 2]', "a message that is a list"),
    (b'{"event": "ready", "extra": 1}', "unexpected keys ['extra']"),
    (b'{"event": "teleport"}', "an unknown event"),
    (b'{"event": "start", "key": "elsewhere/0"}', "a call this process was not asked for"),
    (b'{"event": "result", "key": "group_advantages/frozen/0", "outputs": {"value": 1.0, "x": 2}, "meta": {}}',
     "whose outputs are not ['value']"),
    (b'{"event": "result", "key": "group_advantages/frozen/0", "outputs": {"value": ' + b"[" * 9 + b"1.0" + b"]" * 9
     + b'}, "meta": {"value": {"shape": [1], "dtype": "float64"}}}', "nests lists more than 8 deep"),
    (b'{"event": "result", "key": "group_advantages/frozen/0", "outputs": {"value": [' + b"1.0, " * 100_000
     + b'1.0]}, "meta": {"value": {"shape": [1], "dtype": "float64"}}}', "more than 100000 numbers"),
    (b'{"event": "result", "key": "group_advantages/frozen/0", "outputs": {"value": 1.0}, "meta": {"value": [1]}}',
     "meta of value is a list"),
    (b'{"event": "result", "key": "group_advantages/frozen/0", "outputs": {"value": 1.0}, '
     b'"meta": {"value": {"shape": ["x"], "dtype": "float64"}}}', "not a list of sizes"),
    (b'{"event": "refused", "message": 7}', "is a number, not text"),
    (b'{"event": "result", "key": "sapo_gate/frozen/0", "outputs": {"value": 1.0}, "meta": {}}',
     "whose outputs are not ['value', 'grad_ratio']"),  # the gate's gradient cannot be left out
])
def test_each_message_is_checked_against_the_schema(line, says):
    # catches: a message of the wrong shape taken as an event (a list where a key belongs, keys the harness never
    # sends, a call another process grades, outputs or meta of the wrong structure or nesting, text that is not
    # text), which the grading process would then index, hash or print
    calls = {"group_advantages/frozen/0": "group_advantages", "sapo_gate/frozen/0": "sapo_gate"}
    with pytest.raises(student_messages.Malformed, match=re.escape(says)):
        student_messages.parse_event(line, calls)


def test_a_correct_event_passes_the_schema_and_text_is_cut_to_one_printable_line():
    # catches: a schema so strict that the harness's own messages fail it, or text kept with its newlines and
    # escape sequences
    calls = {"sapo_loss/fresh/1": "sapo_loss"}
    event = {"event": "result", "key": "sapo_loss/fresh/1", "outputs": {"value": -0.25, "grad_logp": [[0.5, 0.0]],
                                                                        "grad_behavior_logp": None},
             "meta": {"value": {"shape": [], "dtype": "float64"}}}
    assert student_messages.parse_event(json.dumps(event).encode(), calls) == event
    refused = student_messages.parse_event(b'{"event": "refused", "message": "a\\nb\\u001b[2Jc"}', calls)
    assert refused["message"] == "a?b?[2Jc"
    assert student_messages.parse_reply(b'{"loss": 2}') == {"loss": 2.0}
    for reply in (b'{"loss": "2"}', b'{"loss": 1, "error": "x"}', b'[]', b'{"not_implemented": 1}'):
        with pytest.raises(student_messages.Malformed):
            student_messages.parse_reply(reply)


SLEEPS = '''
    import time

    def _sleep(*args, **kwargs):
        time.sleep(3600)

    group_advantages = masked_mean = clipped_surrogate_loss = sapo_gate = sapo_loss = _sleep
    gspo_sequence_ratio = update_loss = _sleep
    '''


def test_a_module_whose_every_function_sleeps_is_stopped_by_the_budget(tmp_path):
    # catches: no bound on the whole grading (the issue: 42 hung calls, each restarting a process, 87 minutes at
    # the default limit), a hung part taking the next part's grading with it (masked_mean must still be tried
    # and time out on its own), or a budget the report does not state
    # limits of seconds, so that a loaded machine's slow import stays within them
    report = grader.grade(str(write(tmp_path, SLEEPS, with_handout=False)), seed=SEED, time_limit=2, budget=6)
    notes = {p.part: p.note for p in report.parts}
    assert all(p.earned == 0 for p in report.parts), report.lines()
    assert notes["group_advantages"] == "exceeded the time limit (2 s) (frozen case 1)", notes
    assert notes["masked_mean"] == "exceeded the time limit (2 s) (frozen case 1)", notes
    ran_out = "not graded: the time budget ran out (6 s for all the module's calls, --budget)"
    assert all(notes[p].startswith(ran_out) for p in ("sapo_loss", "update_loss", "clipped_surrogate_loss")), notes
    lines = report.lines()
    assert "time limits: 2 s for each call (--time-limit), 6 s for all the module's calls together (--budget)" \
        in lines, lines
    assert lines[1] == isolation.sandbox_status().line, lines  # the second line: how the code ran


def _children(pid: int) -> set[int]:
    """Every process below ``pid`` now (from /proc: each process's parent)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, parent in parents.items() if parent == p}
        todo += list(kids - found)
        found |= kids
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("isolated", [True, False])
def test_the_students_processes_die_when_the_grader_is_killed(tmp_path, isolated):
    # catches: student processes that outlive the grader (the issue: killed by a course's `timeout`, the grader
    # left its sandbox processes running under PID 1 for minutes): in the sandbox (bwrap's --die-with-parent) and
    # without one (the death signal set before the harness starts)
    if isolated and not isolation.sandbox_status().isolated:
        pytest.skip("no sandbox here")
    module = write(tmp_path, "import time\ntime.sleep(3600)\n", with_handout=False)
    env = {**os.environ, **({} if isolated else {"SAPO_LAB_GRADE_NO_SANDBOX": "1"})}
    grading = subprocess.Popen([sys.executable, "-m", "sapo_lab", "grade", str(module), "--seed", "1"], cwd=ROOT,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        for _ in range(1200):  # until the student's process has started (its harness loads torch)
            children = _children(grading.pid)
            if any("sandbox.py" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")
                   for c in children if _alive(c)):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the student's process never started")
        grading.kill()
        grading.wait()
        for _ in range(100):
            left = [c for c in children if _alive(c)]
            if not left:
                break
            time.sleep(0.1)
        assert not left, [Path(f"/proc/{c}/cmdline").read_text(errors="replace") for c in left]
    finally:
        if grading.poll() is None:
            grading.kill()


def test_a_submission_that_is_a_link_to_the_repositorys_module_is_refused(tmp_path):
    # catches: the attacker's shortest way to full marks with the repository on the machine: hand in a symbolic
    # link to tests/course/assignment_modules/from_handout.py (a git repository stores links), whose text the
    # grader would copy into the sandbox as the submission
    link = tmp_path / "sapo_assignment.py"
    link.symlink_to(HANDOUT)
    with pytest.raises(grader.NotGradable, match="is a symbolic link: hand in the module's file itself"):
        grader.grade(str(link), seed=SEED, parts=["group_advantages"])


def test_a_submission_too_large_to_be_source_is_refused(tmp_path):
    # catches: a file of gigabytes copied into every sandbox's folder (the disk of the grading machine filled)
    big = tmp_path / "big.py"
    with open(big, "wb") as f:
        f.truncate(grader.SUBMISSION_CAP + 1)
    with pytest.raises(grader.NotGradable, match=r"holds 16 MiB: a module's source is far smaller"):
        grader.grade(str(big), seed=SEED, parts=["group_advantages"])


def test_a_submission_reached_through_a_linked_folder_into_the_checkout_is_refused(tmp_path):
    # catches: the link check made on the file's own name only: a student's folder that is a link to the
    # repository's tests/course/assignment_modules hands in from_handout.py as a regular file
    (tmp_path / "student").symlink_to(HANDOUT.parent, target_is_directory=True)
    with pytest.raises(grader.NotGradable, match="leads into the grader's checkout through a linked folder"):
        grader.grade(str(tmp_path / "student" / HANDOUT.name), seed=SEED, parts=["group_advantages"])


def test_a_run_without_a_sandbox_says_on_every_report_that_it_is_not_for_credit(tmp_path, monkeypatch):
    # catches: a grader that falls back to the audit hook alone (bubblewrap missing or failing) in silence, on the
    # report or on the one line of a module it cannot grade
    from _grade_cli import grade_in_process

    monkeypatch.setenv("SAPO_LAB_GRADE_NO_SANDBOX", "1")
    report = grader.grade(str(HANDOUT), seed=SEED, parts=["group_advantages"])
    assert report.passed and report.lines()[1].startswith("NOT ISOLATED: SAPO_LAB_GRADE_NO_SANDBOX is set; ")
    assert report.lines()[1].endswith("not for credit"), report.lines()
    run = grade_in_process(str(write(tmp_path, "raise SystemExit(3)\n", with_handout=False)), "--seed", "1")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "does not import: SystemExit: 3 [NOT ISOLATED: " in run.stderr and "not for credit]" in run.stderr


def test_the_instructors_switch_shows_a_package_installed_inside_a_bound_site_folder(monkeypatch, tmp_path):
    """sapo_lab installed into site-packages (not editable) lies inside a folder the sandbox binds, where it is
    hidden under an empty tmpfs; --allow-sapo-lab must then leave it in sight. Catches a switch that binds the
    package and hides it again (the hide sorted after the bind at the same depth), so that it has no effect,
    and a switch that stops hiding the checkout too."""
    site = tmp_path / "site-packages"
    package = site / "sapo_lab"
    package.mkdir(parents=True)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setattr(isolation, "PACKAGE_DIR", package)
    monkeypatch.setattr(isolation, "ROOT", checkout)
    monkeypatch.setattr(isolation, "site_entries", lambda: [str(site), str(tmp_path)])

    def hidden(args):
        return {args[i + 1] for i, a in enumerate(args) if a == "--tmpfs"}

    refused = isolation.mounts("/nonexistent-submission", allow_sapo_lab=False)
    allowed = isolation.mounts("/nonexistent-submission", allow_sapo_lab=True)
    assert str(package) in hidden(refused) and str(checkout) in hidden(refused)
    assert str(package) not in hidden(allowed) and str(checkout) in hidden(allowed)
