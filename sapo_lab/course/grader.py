"""Grade a student's SAPO assignment module, running the student's code in a sandbox of its own.

``python -m sapo_lab grade PATH_TO_MODULE [--train] [--seed N] [--time-limit S] [--budget S] [--allow-sapo-lab]``
prints the points of each part and, where a part fails, one line naming the mistake. The student's code runs only
in child processes (``sandbox.py``), each in a bubblewrap sandbox (``isolation.py``) that holds a copy of the module
alone, with Python, torch and numpy: no checkout, no frozen outputs, no sapo_lab, no network, no new processes.
Each call has a time limit (``--time-limit``) and all calls together a budget (``--budget``); every message the
child sends is checked against a schema (``student_messages.py``); the children die with this process. Where no
sandbox can start, the audit hook inside ``sandbox.py`` guards alone and the report says the run is not for
credit. The inputs and the reference outputs stay in this process, which compares, reports and chooses the exit
status: 0 when every part graded passes, 1 otherwise, 2 (one line) when the module cannot be graded.

Each part is graded on the frozen cases of ``assignment/expected.json`` and on fresh cases drawn from ``--seed`` at
grading time, whose reference outputs sapo_lab computes here. A failing part is named by the known mistake
(``mistakes.py``, the catalogue the book's exercise checks share) whose outputs, computed here from the same
inputs, the student's function reproduces, else by what differs. While part X is graded, the other parts'
functions in the student's module are replaced by stand-ins that ask this process for the plain-torch answers
(``substitutes.py``, computed by ``stand_ins.py``), so one bug costs one part and no answer's code enters the
student's process.

The last part (``--train``) trains the ``cpu-tiny`` GPT-2 through sapo_lab's trainer with the student's
``sapo_loss`` in place of the library's, for ``TRAIN_STEPS`` steps in a process of its own (``train_child.py``),
and requires a held-out Pass@1 gain of at least ``TRAIN_MIN_GAIN``. The student's module is not imported there
either: it runs in a sandboxed student process of its own, which answers each ``sapo_loss`` call of the trainer
with the loss and its gradient, so a module that trains by calling the library (at import or inside
``sapo_loss``) is refused as in the other parts, and nothing it does can touch the training process's numbers or
this process's verdict.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import isolation, substitutes
from .sandbox import observe, observe_with_meta  # noqa: F401 - observe is the generator's recorder
from .stand_ins import StandInServer
from .student_messages import Malformed, one_line, parse_event, parse_reply

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / "assignment" / "expected.json"
SANDBOX = Path(__file__).resolve().with_name("sandbox.py")
PACKAGE_DIR = Path(__file__).resolve().parents[1]
AGGREGATIONS = ("per_response", "token_pool")
# part -> (points, argument names in the order of the skeleton's signature)
PARTS = {
    "group_advantages": (10, ["rewards", "eps"]),
    "masked_mean": (10, ["values", "mask", "aggregation"]),
    "clipped_surrogate_loss": (15, ["logp", "behavior_logp", "advantages", "mask", "eps"]),
    "sapo_gate": (10, ["ratio", "tau"]),
    "sapo_loss": (20, ["logp", "behavior_logp", "advantages", "mask", "tau_pos", "tau_neg"]),
    "gspo_sequence_ratio": (10, ["logp", "behavior_logp", "mask"]),
    "update_loss": (10, ["logp", "behavior_logp", "rewards", "mask", "tau_pos", "tau_neg"]),
}
RATIO_PARTS = ("clipped_surrogate_loss", "sapo_gate", "sapo_loss", "gspo_sequence_ratio", "update_loss")
TRAIN_POINTS = 15
TRAIN_CONFIG = "cpu-tiny"
# The training part runs a fixed number of steps, never a wall-clock limit (the preset's 290 s made the verdict
# depend on the machine's load), on one thread with a fixed seed.
TRAIN_STEPS = 250
TRAIN_SEED = 0
TRAIN_OVERRIDES = {"optimization.max_steps": TRAIN_STEPS, "max_train_time_s": 0, "threads": 1, "seed": TRAIN_SEED}
# Held-out Pass@1 gains after TRAIN_STEPS steps, measured with assignment/measure_training.py on a loaded 2-core
# machine: a correct module (tests/assignment_modules/from_handout.py) for three seeds (0.300 -> 0.916,
# 0.262 -> 0.542, 0.311 -> 0.634), the same module with its SAPO loss's sign flipped (0.300 -> 0.000), and with a
# loss that has no gradient (0.300 -> 0.308: evaluation noise alone). Another machine changes the float rounding,
# and so the trajectory much as another seed does: the threshold is half the smallest correct gain, 0.14 below it,
# 0.13 above the unmoved policy and 0.44 above the flipped sign.
TRAIN_MEASURED = {"correct": {0: 0.6157, 1: 0.2803, 2: 0.3237}, "sign flipped": {0: -0.3003},
                  "no gradient": {0: 0.0073}}
TRAIN_MIN_GAIN = math.floor(50 * min(TRAIN_MEASURED["correct"].values())) / 100  # half, rounded down: 0.14
# A guard against a hung training process, not part of the verdict (which the step budget decides); bytes of the
# training process's output relayed to stderr.
TRAIN_TIME_LIMIT_S = 3 * 3600.0
TRAIN_OUTPUT_CAP = 256 * 1024
ATOL = RTOL = 1e-6
# float64's agreement: two float64 computations of one formula, written differently, agree far closer than this;
# one that rounds to float32 anywhere (a .float(), a float32 constant) does not. A module's process can claim any
# dtype, so the dtype is judged from the numbers, not from the claim.
ATOL_F64, RTOL_F64 = 1e-12, 1e-9
# the training part: the student's loss and gradient on each of the trainer's batches (float32, as the model's)
# held to the handout's definition computed by the grader, relative to the value or the largest gradient
TRAIN_CHECK_RTOL = 1e-3
# The student's code: seconds one call (or the module's import) may take, seconds all of it may take together
# (every call and import of parts 1-7; the training part's sapo_loss calls get a budget of their own of the same
# size), seconds torch may take to load, bytes of its output kept, bytes any file it writes may reach.
TIME_LIMIT_S = 120.0
BUDGET_S = 300.0
STARTUP_LIMIT_S = 600.0
OUTPUT_CAP = 4096
FILE_SIZE_CAP = 64 * 2**20
# Bytes of address space the student's process may add to what it holds once torch is loaded, and bytes of
# events it may send; the prefixes of this process's work folders, which the student's process may not open.
MEMORY_LIMIT_BYTES = 4 * 2**30
EVENTS_CAP = 64 * 2**20
WORK_PREFIXES = ("sapo-grade-", "sapo-train-", "sapo-student-")
MAX_SEED = 2**63 - 1  # the largest seed torch's generator takes
SUBMISSION_CAP = 16 * 2**20  # bytes of the module's file, copied into each sandbox
# the optional arguments of each fresh case (the gate's tau is tau_neg; advantage_eps is group_advantages' eps):
# the first leaves them out, so the student's own defaults run; the others move every one off its default, never
# tau_pos = tau_neg
FRESH_SETTINGS = ({}, {"eps": 0.1, "advantage_eps": 1e-3, "tau_pos": 0.7, "tau_neg": 2.0},
                  {"eps": 0.3, "advantage_eps": 0.1, "tau_pos": 1.5, "tau_neg": 0.5})


class NotGradable(Exception):
    """The module cannot be graded at all (exit 2, one line)."""


def positional(part: str, args: tuple, kwargs: dict) -> list:
    """The arguments of one call in the skeleton's order (keywords placed by name)."""
    names = PARTS[part][1]
    out = list(args)
    out += [kwargs[n] for n in names[len(args):] if n in kwargs]
    return out


def close(a, b, atol: float = ATOL, rtol: float = RTOL) -> bool:
    """Whether two recorded outputs (numbers, lists, dicts of them, or None) agree within the grader's tolerance:
    the same structure, every non-number equal, every number finite and within ``atol + rtol * |b|`` of ``b``."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], atol, rtol) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y, atol, rtol)
                                                                for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isfinite(a) and abs(a - b) <= atol + rtol * abs(b)
    return a == b


def float64_close(a, b) -> bool:
    """:func:`close` at float64's agreement (``ATOL_F64`` + ``RTOL_F64`` * |b|)."""
    return close(a, b, ATOL_F64, RTOL_F64)


def _largest_relative_gap(got, want) -> float:
    gaps = [abs(g - e) / max(abs(e), 1e-300) for _, g, e in _walk(got, want)
            if isinstance(g, float) and isinstance(e, (int, float)) and not float64_close(g, e)]
    return max(gaps, default=0.0)


@dataclass
class PartResult:
    """One graded part: its points, the points earned, and a note (the mistake named, or why it failed)."""

    part: str
    points: int
    earned: int
    note: str = ""
    mistake: str | None = None


@dataclass
class Report:
    """Every part's result, in the handout's order, and the seed of the fresh inputs."""

    parts: list[PartResult] = field(default_factory=list)
    seed: int | None = None
    header: list[str] = field(default_factory=list)  # how the student's code ran: the sandbox, the time limits
    for_credit: bool = True  # False where the student's code ran without the sandbox, or with sapo_lab allowed

    @property
    def passed(self) -> bool:
        return all(p.earned == p.points for p in self.parts)

    def part(self, name: str) -> PartResult:
        return next(p for p in self.parts if p.part == name)

    def lines(self) -> list[str]:
        out = [] if self.seed is None else [f"fresh inputs drawn from seed {self.seed} (--seed {self.seed} repeats them)"]
        out += self.header
        out += [f"{p.part:24s} {p.earned:3d}/{p.points:<3d} {p.note}".rstrip() for p in self.parts]
        total, earned = sum(p.points for p in self.parts), sum(p.earned for p in self.parts)
        out.append(f"{'total':24s} {earned:3d}/{total}")
        return out


def expected_outputs(path: Path = EXPECTED) -> dict:
    """The frozen inputs and expected outputs of every part (assignment/expected.json)."""
    return json.loads(path.read_text())["parts"]


# ---- what the student's process is asked to do ------------------------------------------------------------
def _jsonable(kwargs: dict) -> dict:
    return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in kwargs.items()}


def fresh_calls(seed: int) -> dict:
    """part -> [(kwargs, expected outputs)] on the batches drawn from ``seed``, the outputs computed by sapo_lab."""
    from .reference import REFERENCE, arguments, fresh_cases, long_responses

    def expected(part, kwargs):
        ref = REFERENCE[part]
        return observe(part, lambda *a, f=ref, p=part, **k: f(*positional(p, a, k)), kwargs)

    out = {part: [] for part in PARTS}
    for case, settings in zip(fresh_cases(seed), FRESH_SETTINGS, strict=True):
        for part in PARTS:
            kwargs = _jsonable(arguments(part, case, settings))
            out[part].append((kwargs, expected(part, kwargs)))
    # GSPO's ratio once more, on 1000-token responses: a product of token ratios overflows there
    kwargs = _jsonable(long_responses(seed))
    out["gspo_sequence_ratio"].append((kwargs, expected("gspo_sequence_ratio", kwargs)))
    return out


@dataclass
class ChildRun:
    """What one student process left: its events (checked; a message that broke the schema is a ``malformed``
    event), exit status, why it was stopped ("call", "budget", "startup" or None) and capped output."""

    events: list
    returncode: int | None
    timed_out: str | None
    output: str

    def first(self, event: str):
        return next((e for e in self.events if e.get("event") == event), None)


class Budget:
    """Seconds the student's code may still run, across all its processes (counted from each process's
    ``ready``: torch's loading is the grader's time, not the student's)."""

    def __init__(self, seconds: float):
        self.total = float(seconds)
        self.spent = 0.0

    def left(self) -> float:
        return self.total - self.spent

    def charge(self, seconds: float) -> None:
        self.spent += max(0.0, seconds)

    def ran_out(self) -> str:
        return f"not graded: the time budget ran out ({self.total:g} s for all the module's calls, --budget)"


class _EventPipe:
    """The pipe a student process writes its events to (one JSON line each), read here by a thread."""

    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        self.data = bytearray()
        self.taken = 0  # bytes of ``data`` already handed out as lines
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, daemon=True)

    def start(self) -> None:
        os.close(self.write_fd)  # the child holds the only writing end now
        self._thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self.read_fd, 65536):
            with self._lock:
                if len(self.data) < EVENTS_CAP:
                    self.data.extend(chunk)
        os.close(self.read_fd)

    def new_lines(self) -> list[bytes]:
        """The complete lines that arrived since the last call."""
        with self._lock:
            end = self.data.rfind(b"\n") + 1
            if end <= self.taken:
                return []
            chunk = bytes(self.data[self.taken:end])
            self.taken = end
        return chunk.split(b"\n")[:-1]

    def join(self) -> None:
        self._thread.join(timeout=5)


def _limit_files() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_CAP, FILE_SIZE_CAP))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _child_setup():
    """The ``preexec_fn`` of every process the grader starts: it dies with the grader, and its files are capped."""
    arm = isolation.dies_with_this_process()

    def setup() -> None:
        arm()
        _limit_files()

    return setup


def _spawn_student(request: dict, cwd: Path, stdout, pass_fds=(), isolated: bool = False
                   ) -> tuple[subprocess.Popen, _EventPipe]:
    """Start the guarded student process: its request goes over its stdin (never written to disk), its events
    come back over a pipe of their own, its address space and file sizes are capped. ``isolated``: in a
    bubblewrap sandbox that holds a copy of the module alone (``isolation.py``)."""
    events = _EventPipe()
    request = {**request, "blocked_prefixes": [str(Path(tempfile.gettempdir()) / p) for p in WORK_PREFIXES],
               "memory_limit": MEMORY_LIMIT_BYTES}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if isolated:
        submission = cwd / "submission"
        submission.mkdir(parents=True, exist_ok=True)
        name = Path(request["module"]).name
        shutil.copyfile(request["module"], submission / name)
        request = {**request, "module": f"{isolation.SUBMISSION_DIR}/{name}", "site_dirs": isolation.site_dirs(),
                   "isolated": True}
        cmd = isolation.command(str(submission), [str(events.write_fd)], allow_sapo_lab=request["allow_sapo_lab"])
    else:
        cmd = [sys.executable, "-I", "-B", str(SANDBOX), str(events.write_fd)]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.STDOUT,
                            pass_fds=(events.write_fd, *pass_fds), start_new_session=True,
                            preexec_fn=_child_setup())
    events.start()
    try:
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc, events


def _kill(proc: subprocess.Popen) -> None:
    """End a student process and its group at once (in a sandbox, bwrap takes every process inside with it)."""
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass
    proc.wait()


def run_child(request: dict, workdir: Path, time_limit: float, budget: Budget | None = None,
              isolated: bool = False) -> ChildRun:
    """Run the student's process on ``request``: killed (with everything it started) when one call (or the
    import) goes ``time_limit`` seconds without an answer, when ``budget`` runs out, or STARTUP_LIMIT_S after it
    started if it never loads torch; its messages checked as they arrive; output capped at OUTPUT_CAP bytes."""
    budget = budget or Budget(math.inf)
    workdir.mkdir(parents=True, exist_ok=True)
    calls = {c["key"]: c["part"] for c in request["calls"]}
    server = None
    if request["substitute_names"]:  # the handout's functions, computed here for the student's process
        server = StandInServer({name: getattr(substitutes, name) for name in request["substitute_names"]})
        request = {**request, "stand_in": list(server.child_fds)}
    proc, pipe = _spawn_student(request, workdir, subprocess.PIPE, isolated=isolated,
                                pass_fds=server.child_fds if server else ())
    if server is not None:
        server.start()
    kept = bytearray()

    def drain():
        while chunk := proc.stdout.read(65536):
            if len(kept) < OUTPUT_CAP:
                kept.extend(chunk[: OUTPUT_CAP - len(kept)])

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    events: list = []
    started = time.monotonic()
    clock = {"ready": None, "progress": None}

    def take() -> None:
        now = time.monotonic()
        for line in pipe.new_lines():
            try:
                event = parse_event(line, calls)
            except Malformed as exc:
                events.append({"event": "malformed", "why": str(exc)})
                continue
            events.append(event)
            if event["event"] == "ready" and clock["ready"] is None:
                clock["ready"] = now
            # calls run one after another, so a call's time counts from the last answer (or the import's end);
            # no other message restarts it (a module may send "start" again for the call it is stuck in)
            if event["event"] in ("ready", "imported", "result"):
                clock["progress"] = now

    timed_out = None
    while proc.poll() is None:
        take()
        now = time.monotonic()
        if clock["ready"] is None:
            timed_out = "startup" if now - started > STARTUP_LIMIT_S else None
        elif now - clock["ready"] >= budget.left():
            timed_out = "budget"
        elif now - clock["progress"] > time_limit:
            timed_out = "call"
        if timed_out:
            _kill(proc)
            break
        time.sleep(0.05)
    ended = time.monotonic()
    reader.join(timeout=5)
    pipe.join()
    if server is not None:
        server.join()
    take()
    if clock["ready"] is not None:
        budget.charge(ended - clock["ready"])
    return ChildRun(events, proc.returncode, timed_out, kept.decode(errors="replace"))


def _blocked_paths(allow_sapo_lab: bool) -> tuple[list, list]:
    return ([] if allow_sapo_lab else [str(PACKAGE_DIR)]), [str(EXPECTED)]


def refusal_line(path: str, what: str) -> str:
    """The one line a refused module gets, naming what it did (``what``: the guard's words)."""
    if "sapo_lab" in what:
        return (f"{path} {what}: hand in your own implementation "
                "(an instructor may allow sapo_lab with --allow-sapo-lab)")
    return f"{path} {what}: the grader refuses this; a submission computes its answers with torch alone"


def run_student(path: str, calls: dict, allow_sapo_lab: bool = False, time_limit: float = TIME_LIMIT_S,
                budget: Budget | None = None, isolated: bool = False) -> dict:
    """Run the student's functions on ``calls`` (part -> [(key, kwargs)]) in the processes of
    ``substitutes.PROCESSES``; return key -> the call's result (``outputs`` and ``meta``, or ``error``).
    NotGradable when the module is refused, does not import, or ends its process while importing."""
    budget = budget or Budget(BUDGET_S)
    blocked_dirs, blocked_files = _blocked_paths(allow_sapo_lab)
    requests = []
    for graded, substituted in substitutes.PROCESSES:
        todo = [{"part": p, "key": k, "kwargs": kw} for p in graded for k, kw in calls.get(p, [])]
        if todo:
            requests.append({
                "module": str(Path(path).resolve()), "parts": list(PARTS), "calls": todo,
                "substitute_names": list(substituted), "allow_sapo_lab": allow_sapo_lab,
                "blocked_dirs": blocked_dirs, "blocked_files": blocked_files,
                "extra_sys_path": [str(ROOT)] if allow_sapo_lab else [],
            })
    # One process after another, in the handout's dependency order: a process may ask the grading process for
    # the handout's answers (stand-ins, computed here) only of parts whose processes have already ended, and holds
    # no code of them.
    # A process that refused the module or saw it fail to import ends the grading: the checks below say why.
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="sapo-grade-") as tmp:
        if isolated:  # one copy, read once: every process grades the same text, whatever becomes of the file
            snapshot = Path(tmp) / "handed-in" / Path(path).name
            snapshot.parent.mkdir()
            shutil.copyfile(path, snapshot)
            requests = [{**request, "module": str(snapshot)} for request in requests]
        for i, request in enumerate(requests):
            imported = any(run.first("imported") for process_runs, _ in outcomes for run in process_runs)
            outcomes.append(_run_calls(request, Path(tmp) / f"p{i}", time_limit, budget, isolated, imported))
            if any(run.first("refused") or run.first("imported") is None for run in outcomes[-1][0]):
                break
    runs = [run for process_runs, _ in outcomes for run in process_runs]
    for run in runs:
        refused = run.first("refused")
        if refused:
            raise NotGradable(refusal_line(path, refused["message"]))
    for run in runs:
        failed = run.first("import_failed")
        if failed:
            raise NotGradable(f"{path} does not import: {failed['message']}")
        if run.first("imported") is None:
            if run.first("ready") is None:
                last = one_line((run.output.strip().splitlines() or ["no output"])[-1], 200)
                raise NotGradable(f"the process that runs the module did not start (exit status {run.returncode}): {last}")
            if run.timed_out == "budget":
                raise NotGradable(f"{path} did not finish importing within the time budget ({budget.total:g} s)")
            if run.timed_out:
                raise NotGradable(f"{path} did not finish importing within the time limit ({time_limit:g} s)")
            raise NotGradable(f"{path} ended its own process while importing (exit status {run.returncode})")
    return {key: result for _, results in outcomes for key, result in results.items()}


NOT_ACCEPTED = "sent the grader a message it does not accept: "


def _collect(run: ChildRun, todo: list, results: dict, forged: dict) -> str | None:
    """Record ``run``'s results in ``results`` (key -> result); a message that broke the schema, or a second
    result for one call, condemns the call in progress (or else the next one not yet answered) in ``forged``.
    Returns the key of a call that started and never answered."""
    current = None
    for e in run.events:
        kind = e["event"]
        if kind == "start":
            current = e["key"]
        elif kind == "result":
            if e["key"] in results:
                forged.setdefault(e["key"], NOT_ACCEPTED + "a second result for one call")
            else:
                results[e["key"]] = {k: e[k] for k in ("outputs", "meta", "error") if k in e}
            if current == e["key"]:
                current = None
        elif kind == "malformed":
            target = current or next((c["key"] for c in todo if c["key"] not in results), None)
            if target is not None:
                forged.setdefault(target, NOT_ACCEPTED + e["why"])
    return current


def _run_calls(request: dict, workdir: Path, time_limit: float, budget: Budget, isolated: bool = False,
               imported_before: bool = False) -> tuple[list, dict]:
    """Run ``request``'s calls; when a call hangs or ends the process, record that for the call, skip the rest
    of its part (already failed) and go on with the other parts' calls in a fresh process, so one such call costs
    only its own part and each part at most one time limit. When ``budget`` runs out, the calls not yet answered
    are not graded (also when it runs out while a module that imported before imports again). Returns every
    process's ChildRun and key -> result."""
    runs, results, forged, todo = [], {}, {}, list(request["calls"])
    while todo:
        if budget.left() <= 0:
            results.update({c["key"]: {"error": budget.ran_out()} for c in todo})
            break
        run = run_child({**request, "calls": todo}, workdir / f"run{len(runs)}", time_limit, budget, isolated)
        if run.timed_out == "budget" and run.first("imported") is None and (runs or imported_before):
            results.update({c["key"]: {"error": budget.ran_out()} for c in todo})
            break
        runs.append(run)
        if run.first("imported") is None or run.first("refused") is not None:
            break
        stuck = _collect(run, todo, results, forged)
        if stuck is not None and stuck not in results:
            results[stuck] = {"error": {"call": f"exceeded the time limit ({time_limit:g} s)",
                                        "budget": budget.ran_out()}.get(
                run.timed_out, f"ended its own process (exit status {run.returncode})")}
            part = next(c["part"] for c in todo if c["key"] == stuck)
            results.update({c["key"]: {"error": f"not graded: an earlier call of {part} did not answer"}
                            for c in todo if c["part"] == part and c["key"] not in results})
        if run.timed_out == "budget":
            results.update({c["key"]: {"error": budget.ran_out()} for c in todo if c["key"] not in results})
            break
        left = [c for c in todo if c["key"] not in results]
        if len(left) == len(todo):  # no progress: the process ended before its first call
            for c in left:
                results[c["key"]] = {"error": f"not graded: the module's process ended (exit status {run.returncode})"}
            break
        todo = left
    results.update({key: {"error": why} for key, why in forged.items()})
    return runs, results


# ---- comparing, and naming what is wrong --------------------------------------------------------------------
def _shape(x) -> list:
    return [len(x)] + (_shape(x[0]) if x else []) if isinstance(x, list) else []


def _form_problem(expected: dict, got: dict, meta: dict) -> str | None:
    """A returned value of the wrong kind, shape or dtype, said in words; None when every one is right."""
    for key, want in expected.items():
        if key.startswith("grad_"):
            continue
        m = meta.get(key, {})
        what = "the loss" if key == "value" and isinstance(want, float) else key.replace("_", "-")
        if "type" in m:
            kind = "a 0-d tensor" if not _shape(want) else f"a tensor of shape {tuple(_shape(want))}"
            article = "an" if m["type"][:1].lower() in "aeiou" else "a"
            return f"returns {article} {m['type']} for {what}, not {kind}"
        if m.get("shape") != _shape(want):
            hint = " (a 0-d tensor: no keepdim, no [None])" if not _shape(want) else ""
            return f"wrong shape: returns {tuple(m.get('shape', []))} for {what}, expected {tuple(_shape(want))}{hint}"
        if m.get("dtype") != "float64":
            return f"wrong dtype: returns {m.get('dtype')} for float64 inputs (compute in the inputs' dtype)"
    return None


def _walk(got, want, path=""):
    """(path, got, expected) for every number of ``want``, in order (got None where the structures differ)."""
    if isinstance(want, dict):
        for k in want:
            yield from _walk(got.get(k) if isinstance(got, dict) else None, want[k], f"{path}.{k}" if path else k)
    elif isinstance(want, list):
        for i, w in enumerate(want):
            g = got[i] if isinstance(got, list) and i < len(got) else None
            yield from _walk(g, w, f"{path}[{i}]")
    else:
        yield path, got, want


def _number(x) -> str:
    return f"{x:.6g}" if isinstance(x, (int, float)) else str(x)


def known_mistakes(part: str, inputs: dict) -> dict:
    """name -> (recorded outputs, fix) of every mistake the catalogue (``mistakes.py``, shared with the book's
    exercise checks) knows for ``part``, computed here from one call's inputs as the student's function was
    called. A mistake that cannot be computed on these inputs is left out."""
    from .mistakes import MISTAKES
    from .reference import DEFAULTS

    left = {name: value for name, value in DEFAULTS.get(part, {}).items() if name not in inputs}
    inputs = {**inputs, **left}  # a call that left them to the defaults
    known = {}
    for mistake in MISTAKES.get(part, ()):
        try:
            known[mistake.name] = (observe(part, mistake.compute, inputs), mistake.fix)
        except Exception:  # noqa: BLE001 - a mistake that does not apply to these inputs names nothing
            continue
    return known


def _as_tensor(x):
    """A recorded output as a float64 tensor, or None where it is not numbers of one rectangular shape."""
    import torch

    try:
        return torch.tensor(x, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        return None


def _difference(got, want) -> str:
    """What differs between two recorded outputs (one key's), in words: the sign, a factor, a shift, or the
    elements that differ (``mistakes.describe_difference``); the first number that differs otherwise."""
    from .mistakes import describe_difference

    g, w = _as_tensor(got), _as_tensor(want)
    if g is not None and w is not None and g.shape == w.shape:
        return describe_difference(g, w, rtol=RTOL, atol=ATOL)
    for where, x, e in _walk(got, want):
        if not close(x, e):
            return f"{where or 'the value'}: got {_number(x)}, expected {_number(e)}"
    return "the outputs' structures differ"


OUTPUT_WORDS = {"value": "value", "per_response": "per_response", "token_pool": "token_pool",
                "grad_logp": "gradient with respect to logp", "grad_behavior_logp": "gradient with respect to "
                "behavior_logp", "grad_ratio": "gradient with respect to ratio",
                "grad_per_response": "gradient of per_response with respect to values",
                "grad_token_pool": "gradient of token_pool with respect to values"}


def _precision_verdict(part: str, points: int, calls: list) -> PartResult:
    """The verdict on a part whose every output is within the value tolerance: full points where every number
    also agrees to float64's precision; otherwise the catalogued mistake whose outputs it reproduces to that
    precision (a small one, such as eps inside the square root), or float32 rounding."""
    imprecise = [(label, exp, inputs, res["outputs"]) for label, exp, inputs, res in calls
                 if not float64_close(res["outputs"], exp)]
    if not imprecise:
        return PartResult(part, points, points, "ok")
    with_inputs = [(inputs, got) for _, _, inputs, got in imprecise if inputs is not None]
    knowns = [known_mistakes(part, inputs) for inputs, _ in with_inputs]
    for name, (_, fix) in (knowns[0] if knowns else {}).items():  # a mistake named on every imprecise call
        if all(name in known and float64_close(got, known[name][0])
               for (_, got), known in zip(with_inputs, knowns, strict=True)):
            return PartResult(part, points, 0, f"wrong; most likely mistake: {name}; fix: {fix}", name)
    label, exp, _, got = imprecise[0]
    return PartResult(part, points, 0, f"float32 precision: the numbers agree with the reference only to "
                      f"float32's precision (a relative gap of {_largest_relative_gap(got, exp):.1g}; float64 "
                      f"agrees to 1e-9): compute in float64, the inputs' dtype (no .float(), no float32 constant "
                      f"such as torch.tensor(0.2) or torch.where(c, 1.0, 1.05), whose Python numbers become "
                      f"float32) ({label})", "float32 precision")


def judge_part(part: str, frozen: list, fresh: list) -> PartResult:
    """:func:`_judge_part`'s verdict, which says so where it fails only on the calls that leave the optional
    arguments to the student's own defaults (a signature whose defaults are not the skeleton's)."""
    from .reference import DEFAULTS

    result = _judge_part(part, frozen, fresh)
    optional = list(DEFAULTS.get(part, {}))
    on_defaults = {i for i, settings in enumerate(FRESH_SETTINGS) if not settings and i < len(fresh)}
    if result.earned or not optional or not on_defaults:
        return result
    others = [(case["expected"], res) for case, res in frozen]
    others += [(item[0], item[1]) for i, item in enumerate(fresh) if i not in on_defaults]
    if all("error" not in res and close(res["outputs"], exp) for exp, res in others):
        said = ", ".join(f"{n}={DEFAULTS[part][n]:g}" for n in optional)
        return replace(result, note=f"{result.note}; it fails only on the call that leaves these arguments to your "
                                    f"function's defaults: are they the skeleton's ({said})?")
    return result


def _judge_part(part: str, frozen: list, fresh: list) -> PartResult:
    """The verdict on one part from its calls' results: ``frozen`` is [(case from expected.json, result)],
    ``fresh`` is [(expected outputs, result)] or [(expected outputs, result, inputs)]; full points only when every
    call matches. A failing part is named by the known mistake whose outputs it reproduces on the inputs of the
    failing calls, else by what differs."""
    points = PARTS[part][0]
    calls = [(f"frozen case {i + 1}", case["expected"], case.get("inputs"), res)
             for i, (case, res) in enumerate(frozen)]
    calls += [(f"fresh case {i + 1}", item[0], item[2] if len(item) > 2 else None, item[1])
              for i, item in enumerate(fresh)]
    for label, _, _, res in calls:
        if "error" in res:
            whole = res["error"].startswith(("missing:", "not a function:", "not implemented"))  # true of every case alike
            return PartResult(part, points, 0, res["error"] if whole else f"{res['error']} ({label})")
    for label, exp, _, res in calls:
        problem = _form_problem(exp, res["outputs"], res.get("meta", {}))
        if problem:
            return PartResult(part, points, 0, f"{problem} ({label})")
    failing = [(label, exp, inputs, res["outputs"]) for label, exp, inputs, res in calls
               if not close(res["outputs"], exp)]
    if not failing:
        return _precision_verdict(part, points, calls)
    knowns = [known_mistakes(part, inputs) if inputs is not None else {} for _, _, inputs, _ in failing]
    named = [(known, got) for known, (_, _, _, got) in zip(knowns, failing, strict=True) if known]
    scores, fixes = {}, {}
    for known, got in named:
        for name, (out, fix) in known.items():
            scores[name] = scores.get(name, 0) + close(got, out)
            fixes[name] = fix
    best = max(scores, key=scores.get, default=None)
    if best is not None and scores[best] > 0:
        share = "" if scores[best] == len(named) else f" (matches {scores[best]} of {len(named)} failing cases)"
        return PartResult(part, points, 0, f"wrong; most likely mistake: {best}{share}; fix: {fixes[best]}", best)
    for (_, exp, _, got), known in zip(failing, knowns, strict=True):  # one output of several wrong
        if not (isinstance(exp, dict) and isinstance(got, dict) and len(exp) > 1):
            continue
        for key in exp:
            if close(got.get(key), exp[key]):
                continue
            for name, (out, fix) in known.items():
                if isinstance(out, dict) and close(got.get(key), out.get(key)):
                    return PartResult(part, points, 0, f"wrong {key}; most likely mistake: {name}; fix: {fix}", name)
    for label, exp, _, got in failing:
        for where, g, e in _walk(got, exp):
            if isinstance(g, float) and not math.isfinite(g) and isinstance(e, (int, float)) and math.isfinite(e):
                hint = ("; these inputs hold ratios up to e^7.5: does something overflow, e.g. exp(x) / (1 + exp(x))?"
                        if part in RATIO_PARTS else "; a division by zero?")
                if part == "gspo_sequence_ratio":
                    hint = ("; these responses hold up to 1000 tokens, whose product of ratios overflows: average "
                            "the log-ratios, then take exp")
                return PartResult(part, points, 0, f"{g} at {where} where the reference is {_number(e)} ({label}){hint}")
    for label, exp, _, got in failing:
        if "grad_behavior_logp" in exp and exp["grad_behavior_logp"] is None and got.get("grad_behavior_logp"):
            return PartResult(part, points, 0, f"a gradient reaches behavior_logp ({label}): detach behavior_logp")
        if exp.get("grad_logp") is not None and got.get("grad_logp") is None:
            return PartResult(part, points, 0, f"no gradient reaches logp ({label}): is the result detached?")
        for key in ("grad_ratio", "grad_per_response", "grad_token_pool"):
            if exp.get(key) is not None and got.get(key) is None:
                return PartResult(part, points, 0, f"no {OUTPUT_WORDS[key]} ({label}): is something detached or "
                                  "computed outside torch (.item(), a Python number)? The SAPO loss trains through it")
    label, exp, _, got = failing[0]
    key = next(k for k in exp if not close(got.get(k) if isinstance(got, dict) else None, exp[k]))
    said = _difference(got.get(key), exp[key])
    grad = got.get("grad_logp")
    if key == "value" and not _shape(exp[key]) and grad is not None and not close(grad, exp.get("grad_logp")):
        # one wrong number says little; its gradient, a number per token, shows a sign, a factor or the tokens
        said += f"; the gradient with respect to logp: {_difference(grad, exp['grad_logp'])}"
    return PartResult(part, points, 0, f"wrong {OUTPUT_WORDS.get(key, key)}: {said} ({label})")


def sandbox_status(isolate: bool = True) -> isolation.SandboxStatus:
    """Whether the student's processes run in a bubblewrap sandbox (``isolate`` False: the audit hook alone, as
    where bubblewrap is missing; the tests of the hook's own messages use it)."""
    return isolation.sandbox_status() if isolate else isolation.SandboxStatus(False, "isolation turned off")


def time_line(time_limit: float, budget: float) -> str:
    """The report's line stating the per-call limit and the whole submission's budget."""
    return (f"time limits: {time_limit:g} s for each call (--time-limit), {budget:g} s for all the module's calls "
            "together (--budget)")


def grade(path: str, seed: int | None = None, allow_sapo_lab: bool = False, time_limit: float = TIME_LIMIT_S,
          expected: dict | None = None, parts=None, budget: float = BUDGET_S, isolate: bool = True) -> Report:
    """Grade every part (or ``parts``) of the student's module at ``path`` on the frozen cases and on fresh cases
    drawn from ``seed`` (random when None, and stated in the report), the student's code in a sandbox where this
    machine has bubblewrap (the report says whether it had). NotGradable when it cannot be graded."""
    p = Path(path)
    if p.is_dir():
        raise NotGradable(f"{path} is a folder: name your module's .py file (e.g. {Path(path) / 'sapo_assignment.py'})")
    if not p.is_file():
        raise NotGradable(f"{path}: no such file")
    if p.suffix != ".py":
        raise NotGradable(f"{path} is not a .py module: hand in a Python file whose name ends in .py")
    if p.is_symlink():  # a link handed in would bring the file it leads to, the repository's own modules included
        raise NotGradable(f"{path} is a symbolic link: hand in the module's file itself")
    if p.resolve().is_relative_to(ROOT) and not Path(os.path.abspath(p)).is_relative_to(ROOT):
        raise NotGradable(f"{path} leads into the grader's checkout through a linked folder: hand in your own file")
    if p.stat().st_size > SUBMISSION_CAP:
        raise NotGradable(f"{path} holds {p.stat().st_size // 2**20} MiB: a module's source is far smaller "
                          f"(at most {SUBMISSION_CAP // 2**20} MiB)")
    seed = secrets.randbelow(2**31) if seed is None else int(seed)
    if not 0 <= seed <= MAX_SEED:
        raise NotGradable(f"--seed must be an integer from 0 to {MAX_SEED}, got {seed}")
    expected = expected or expected_outputs()
    parts = list(parts or PARTS)
    fresh = fresh_calls(seed)
    calls = {part: [(f"{part}/frozen/{i}", case["inputs"]) for i, case in enumerate(expected[part])]
             + [(f"{part}/fresh/{i}", kw) for i, (kw, _) in enumerate(fresh[part])] for part in parts}
    status = sandbox_status(isolate)
    results = run_student(str(p), calls, allow_sapo_lab, time_limit, Budget(budget), status.isolated)
    report = Report(seed=seed, header=[status.line, time_line(time_limit, budget)],
                    for_credit=status.isolated and not allow_sapo_lab)
    for part in parts:
        frozen = [(case, results[f"{part}/frozen/{i}"]) for i, case in enumerate(expected[part])]
        new = [(exp, results[f"{part}/fresh/{i}"], kw) for i, (kw, exp) in enumerate(fresh[part])]
        report.parts.append(judge_part(part, frozen, new))
    return report


def load_module(path: str):
    """Import the student's file in this process: for an instructor's measurement (``assignment/measure_training.py``)
    of a trusted module; the grader never imports a student's module outside a guarded student process."""
    p = Path(path)
    name = f"_sapo_assignment_{abs(hash(str(p.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, p)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(p.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure of the student's import is reported in one line
        raise NotGradable(f"{path} does not import: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    finally:
        sys.path.remove(str(p.resolve().parent))
    return module


# ---- the training part's student process ----------------------------------------------------------------
class StudentLossError(RuntimeError):
    """The student's sapo_loss failed, hung, or its process ended; one line."""


class StudentRefused(StudentLossError):
    """The student's process did something the guard refuses (import sapo_lab, read its files, start a process)."""


class StudentLoss:
    """The student's ``sapo_loss``, called in the guarded student process and answered with a value and a gradient.

    ``self(logp, behavior_logp, advantages, mask, tau_pos=, tau_neg=)`` returns ``value + <grad, logp - logp.detach()>``:
    the student's loss value, whose gradient with respect to ``logp`` is the student's gradient."""

    def __init__(self, module_path: str, workdir: Path, allow_sapo_lab: bool = False, call_limit: float | None = None,
                 budget: float | None = None, isolate: bool = True):
        self.path = module_path
        self.call_limit = TIME_LIMIT_S if call_limit is None else call_limit
        self.budget = Budget(BUDGET_S if budget is None else budget)  # the seconds of every sapo_loss call together
        request_read, self._request_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        blocked_dirs, blocked_files = _blocked_paths(allow_sapo_lab)
        request = {"module": str(Path(module_path).resolve()), "parts": list(PARTS), "calls": [],
                   "substitute_names": [], "allow_sapo_lab": allow_sapo_lab,
                   "blocked_dirs": blocked_dirs, "blocked_files": blocked_files,
                   "extra_sys_path": [str(ROOT)] if allow_sapo_lab else [],
                   "serve": [request_read, reply_write]}
        # what the module prints is not shown (the training process's output is relayed to the grader's stderr)
        self.proc, self._event_pipe = _spawn_student(request, workdir, subprocess.DEVNULL,
                                                     pass_fds=(request_read, reply_write),
                                                     isolated=sandbox_status(isolate).isolated)
        os.close(request_read)
        os.close(reply_write)
        self._buffer = bytearray()
        self._seen: list = []
        self.refused: str | None = None

    # ---- the student's process --------------------------------------------------------------------------
    def _events(self) -> list:
        """The events so far (checked; one that broke the schema is a ``malformed`` event)."""
        for line in self._event_pipe.new_lines():
            try:
                self._seen.append(parse_event(line, {}))
            except Malformed as exc:
                self._seen.append({"event": "malformed", "why": str(exc)})
        return self._seen

    def _ended(self) -> StudentLossError:
        """The error to raise once the student's process has stopped answering."""
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.close()
        events = self._events()
        refused = next((e for e in events if e.get("event") == "refused"), None)
        if refused is not None:
            self.refused = refused["message"]
            return StudentRefused(self.refused)
        failed = next((e for e in events if e.get("event") == "import_failed"), None)
        if failed is not None:
            return StudentLossError(f"does not import: {failed['message']}")
        return StudentLossError(f"the student's process ended (exit status {self.proc.returncode})")

    def wait_imported(self) -> None:
        """Return once the module has imported; StudentLossError (StudentRefused) when it does not."""
        deadline = time.monotonic() + STARTUP_LIMIT_S + self.call_limit
        while time.monotonic() < deadline:
            if any(e.get("event") == "imported" for e in self._events()):
                return
            if self.proc.poll() is not None:
                raise self._ended()
            time.sleep(0.05)
        self.close(hung=True)
        raise StudentLossError(f"did not finish importing within the time limit ({self.call_limit:g} s)")

    def _read(self, deadline: float, n: int | None = None) -> bytes:
        """One line (``n`` None) or ``n`` bytes of the reply; StudentLossError past ``deadline`` (the call's time
        limit, or the end of the budget)."""
        while True:
            end = self._buffer.find(b"\n") + 1 if n is None else (n if len(self._buffer) >= n else 0)
            if end:
                data = bytes(self._buffer[:end])
                del self._buffer[:end]
                return data
            left = deadline - time.monotonic()
            if left <= 0:
                self.close(hung=True)
                if self.budget.left() < self.call_limit:
                    raise StudentLossError(f"sapo_loss calls ran past the time budget ({self.budget.total:g} s "
                                           "for all of them, --budget)")
                raise StudentLossError(f"sapo_loss did not return within the time limit ({self.call_limit:g} s)")
            ready, _, _ = select.select([self._reply_read], [], [], left)
            if ready:
                chunk = os.read(self._reply_read, 1 << 20)
                if not chunk:
                    raise self._ended()
                self._buffer += chunk

    def __call__(self, logp, behavior_logp, advantages, mask, *, tau_pos, tau_neg):
        import torch

        wire = logp.dtype if logp.dtype in (torch.float32, torch.float64) else torch.float32
        sent = [t.detach().to("cpu", wire).contiguous() for t in (logp, behavior_logp, advantages, mask)]
        head = {"dtype": str(wire).removeprefix("torch."), "shapes": [list(t.shape) for t in sent],
                "tau_pos": float(tau_pos), "tau_neg": float(tau_neg)}
        began = time.monotonic()
        deadline = began + min(self.call_limit, self.budget.left())
        try:
            os.write(self._request_write, json.dumps(head).encode() + b"\n")
            for t in sent:
                data = memoryview(t.numpy().tobytes())
                while data:
                    data = data[os.write(self._request_write, data):]
        except BrokenPipeError:
            raise self._ended() from None
        try:
            reply = parse_reply(self._read(deadline))
        except Malformed as exc:
            self.close(hung=True)
            raise StudentLossError(f"{NOT_ACCEPTED}{exc}") from None
        finally:
            self.budget.charge(time.monotonic() - began)
        if "refused" in reply:
            self.refused = reply["refused"]
            raise StudentRefused(self.refused)
        if reply.get("not_implemented"):
            raise NotImplementedError("sapo_loss")
        if "error" in reply:
            raise StudentLossError(reply["error"])
        grad = self._read(deadline, sent[0].numel() * sent[0].element_size())
        grad = torch.frombuffer(bytearray(grad), dtype=wire).reshape(logp.shape)
        self._check_against_handout(sent, reply["loss"], grad, float(tau_pos), float(tau_neg))
        grad = grad.to(logp.device, logp.dtype)
        value = torch.tensor(reply["loss"], dtype=logp.dtype, device=logp.device)
        return value + (grad * (logp - logp.detach())).sum()

    def _check_against_handout(self, sent: list, value: float, grad, tau_pos: float, tau_neg: float) -> None:
        """The student's answer on the trainer's own batch held to the handout's definition, computed here: a
        module can tell training from the graded calls (by its inputs, or its call stack) and train with another
        loss, whose gain would then be credited to SAPO. Tolerances are float32's, the wire's usual dtype."""
        import torch

        logp = sent[0].clone().requires_grad_(True)
        ref = substitutes.sapo_loss(logp, *sent[1:], tau_pos=tau_pos, tau_neg=tau_neg)
        (ref_grad,) = torch.autograd.grad(ref, logp)
        scale = float(ref_grad.abs().max()) if ref_grad.numel() else 0.0
        ref = float(ref.detach())
        if not math.isclose(value, ref, rel_tol=TRAIN_CHECK_RTOL, abs_tol=TRAIN_CHECK_RTOL):
            self.close(hung=True)
            raise StudentLossError(f"on the trainer's batch your sapo_loss returns {value:.6g} where the handout's "
                                   f"definition gives {ref:.6g} (here it runs with your own helper functions; the "
                                   "loss that trains must be the one graded)")
        if not torch.allclose(grad.to(ref_grad.dtype), ref_grad, rtol=TRAIN_CHECK_RTOL,
                              atol=TRAIN_CHECK_RTOL * scale):
            self.close(hung=True)
            raise StudentLossError("on the trainer's batch the gradient of your sapo_loss with respect to logp "
                                   "differs from the handout's definition (here it runs with your own helper "
                                   "functions: does one of them, such as sapo_gate or masked_mean, detach?)")

    def close(self, hung: bool = False) -> None:
        """End the student's process (and anything it started): given 5 s to leave once its pipes close, or
        killed at once when ``hung`` (it let a time limit pass)."""
        for fd in (self._request_write, self._reply_read):
            try:
                os.close(fd)
            except OSError:
                pass
        self._request_write = self._reply_read = -1
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=0 if hung else 5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, 9)
                except ProcessLookupError:
                    pass
                self.proc.wait()


@contextmanager
def student_loss_in_trainer(module):
    """sapo_lab's trainer with the student's ``sapo_loss`` as the loss it differentiates; the library's
    ``policy_loss`` still supplies the logged diagnostics."""
    from sapo_lab.training import update

    library = update.policy_loss

    def with_student_loss(logp, behavior_logp, advantages, mask, **kwargs):
        out = library(logp, behavior_logp, advantages, mask, **kwargs)
        loss = module.sapo_loss(logp, behavior_logp, advantages, mask.to(logp.dtype),
                                tau_pos=kwargs["tau_pos"], tau_neg=kwargs["tau_neg"])
        return replace(out, loss=loss)

    update.policy_loss = with_student_loss
    try:
        yield
    finally:
        update.policy_loss = library


def train_part(module, config: str = TRAIN_CONFIG, overrides: dict | None = None, min_gain: float = TRAIN_MIN_GAIN,
               run_dir: str | None = None, log=None, reward_fn=None) -> tuple[PartResult, dict | None]:
    """Train with the student's loss; full points when the held-out Pass@1 gain reaches ``min_gain``."""
    from sapo_lab.runs.config import load_config
    from sapo_lab.training.trainer import train

    cfg = load_config(config, {**(TRAIN_OVERRIDES if overrides is None else overrides), "loss.loss_type": "sapo"})
    with tempfile.TemporaryDirectory() as tmp, student_loss_in_trainer(module):
        try:
            summary = train(cfg, run_dir or str(Path(tmp) / "run"), reward_fn=reward_fn, log=log or (lambda m: None),
                            progress=log is not None)
        except NotImplementedError:
            return PartResult("training", TRAIN_POINTS, 0, "sapo_loss not implemented"), None
        except StudentLossError as exc:  # the student's process's one line (what sapo_loss raised, or a time limit)
            return PartResult("training", TRAIN_POINTS, 0, f"training failed: {exc}".splitlines()[0][:160]), None
        except Exception as exc:  # noqa: BLE001
            return PartResult("training", TRAIN_POINTS, 0,
                              f"training failed: {type(exc).__name__}: {exc}".splitlines()[0][:160]), None
    return training_verdict(summary["pass1_gain"], summary.get("steps"), min_gain), summary


def training_verdict(gain: float, steps, min_gain: float = TRAIN_MIN_GAIN) -> PartResult:
    """Full points when the held-out Pass@1 gain reaches ``min_gain``; the note states both."""
    passed = isinstance(gain, (int, float)) and math.isfinite(gain) and gain >= min_gain
    after = f" after {steps} steps" if steps is not None else ""
    note = f"{'ok' if passed else 'below the required gain'}: Pass@1 gain {gain:+.3f}{after} (required {min_gain:+.2f})"
    return PartResult("training", TRAIN_POINTS, TRAIN_POINTS if passed else 0, note)


def train_isolated(path: str, config: str = TRAIN_CONFIG, overrides: dict | None = None,
                   min_gain: float = TRAIN_MIN_GAIN, time_limit: float = TRAIN_TIME_LIMIT_S, err=None,
                   reward: tuple[str, str] | None = None, allow_sapo_lab: bool = False,
                   call_limit: float = TIME_LIMIT_S, budget: float = BUDGET_S, isolate: bool = True) -> PartResult:
    """The training part in its own process (``train_child.py``), whose trainer calls the student's ``sapo_loss`` in
    a guarded student process (refused there like the other parts unless ``allow_sapo_lab``); its output
    (progress and the student's prints) is relayed to ``err`` (stderr) up to TRAIN_OUTPUT_CAP bytes; the numbers
    it returns are compared with ``min_gain`` here. ``reward`` (file, function name) replaces the task's reward
    there. ``call_limit`` (``grade --time-limit``) is the seconds each ``sapo_loss`` call may take, ``budget``
    (``--budget``) the seconds all of them may take together."""
    err = err or sys.stderr
    result_read, result_write = os.pipe()
    request = {"module": str(Path(path).resolve()), "config": config, "reward": reward,
               "allow_sapo_lab": allow_sapo_lab, "call_limit": call_limit, "budget": budget, "isolate": isolate,
               "result_fd": result_write,
               "overrides": TRAIN_OVERRIDES if overrides is None else overrides}
    with tempfile.TemporaryDirectory(prefix="sapo-train-") as tmp:
        # the request goes over stdin and the result comes back over a pipe of its own: no file the student's
        # process could read or overwrite
        proc = subprocess.Popen([sys.executable, "-m", "sapo_lab.course.train_child"], cwd=tmp,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                pass_fds=(result_write,), start_new_session=True, preexec_fn=_child_setup())
        os.close(result_write)
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.close()
        shown = [0]
        result = bytearray()

        def relay():
            while chunk := proc.stdout.read(4096):
                if shown[0] < TRAIN_OUTPUT_CAP:
                    err.write(chunk[: TRAIN_OUTPUT_CAP - shown[0]].decode(errors="replace"))
                    err.flush()
                shown[0] += len(chunk)

        def collect():
            while chunk := os.read(result_read, 65536):
                result.extend(chunk[: 2**20])

        reader = threading.Thread(target=relay, daemon=True)
        collector = threading.Thread(target=collect, daemon=True)
        reader.start()
        collector.start()
        try:
            proc.wait(timeout=time_limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            timed_out = True
        reader.join(timeout=5)
        collector.join(timeout=5)
        os.close(result_read)
        try:
            record = json.loads(bytes(result))
        except ValueError:
            record = None
    if timed_out:
        return PartResult("training", TRAIN_POINTS, 0, f"training exceeded its time limit ({time_limit:g} s)")
    if not isinstance(record, dict):
        return PartResult("training", TRAIN_POINTS, 0,
                          f"the training process ended without a result (exit status {proc.returncode})")
    if "error" in record:
        return PartResult("training", TRAIN_POINTS, 0, str(record["error"])[:400])
    if not isinstance(record.get("pass1_gain"), (int, float)):
        return PartResult("training", TRAIN_POINTS, 0, str(record.get("note", "no result"))[:200])
    return training_verdict(float(record["pass1_gain"]), record.get("steps"), min_gain)


def run_grade(path: str, train: bool = False, out=print, seed: int | None = None, allow_sapo_lab: bool = False,
              time_limit: float = TIME_LIMIT_S, budget: float = BUDGET_S) -> int:
    """The ``grade`` command: print the report; 0 all passed, 1 a part failed, 2 not gradable (one line, which
    says so where the run was not isolated), 3 all passed but not for credit (the student's code ran without the
    sandbox, or with sapo_lab allowed): a course's autograder that reads only the exit status gives no credit."""
    for flag, value in (("--time-limit", time_limit), ("--budget", budget)):
        if not (value > 0 and math.isfinite(value)):
            print(f"error: {flag} must be a positive number of seconds, got {value!r}", file=sys.stderr)
            return 2
    try:
        report = grade(path, seed=seed, allow_sapo_lab=allow_sapo_lab, time_limit=time_limit, budget=budget)
    except NotGradable as exc:
        status = sandbox_status()
        print(f"error: {exc}" + ("" if status.isolated else f" [{status.line}]"), file=sys.stderr)
        return 2
    if allow_sapo_lab:
        report.header.append("sapo_lab allowed (--allow-sapo-lab): for trying the grader, not for credit")
    if train:
        print(f"training {TRAIN_CONFIG} for {TRAIN_STEPS} steps with your sapo_loss (progress on stderr)",
              file=sys.stderr, flush=True)
        report.parts.append(train_isolated(path, allow_sapo_lab=allow_sapo_lab, call_limit=time_limit,
                                           budget=budget))
    for line in report.lines():
        out(line)
    if not train:
        out(f"(training part not run: add --train to train {TRAIN_CONFIG} with your sapo_loss, "
            f"{TRAIN_POINTS} more points)")
    if not report.passed:
        return 1
    return 0 if report.for_credit else 3
