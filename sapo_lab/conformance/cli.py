"""``python -m sapo_lab conformance MODULE:FUNCTION``: audit a user's SAPO loss and print its verdict.

MODULE is an importable module name or a path to a ``.py`` file; FUNCTION may be dotted
(``losses:Sapo.loss``). The first line is ``CONFORMS`` or ``DIFFERS in N of M checks``, then
one line per difference; ``--details`` prints every check, ``--json`` the card as JSON. What the
loss itself prints is counted, not shown (:class:`LossOutput`).
Exit status: 0 conforms, 1 differs, 2 a usage error or a loss that cannot be audited (one line
on stderr).

The audit itself (:func:`sapo_lab.conformance.audit`) refuses a loss it cannot audit (no finite
value or no gradient in ``logp`` on the plainest batch), audits a loss that computes in a
narrower dtype at that precision, and names the causes; this module loads the target, reports
progress, enforces ``--timeout`` and prints the card.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import math
import os
import sys
import threading
import time

DESCRIPTION = "Audit a SAPO loss against the paper's objective: CONFORMS, or DIFFERS with one line per difference."

EPILOG = """\
the loss:   fn(logp, old_logp, advantages, mask) -> scalar tensor (the loss to minimise)
  logp        (B, T) float, requires grad: the current policy's per-token log-probs
  old_logp    (B, T) float: the behaviour policy's log-probs, passed as data (caller contract:
              without gradient; the audit notes it when the loss does not detach them itself)
  advantages  (B,) float: one advantage per response
  mask        (B, T) bool: True on response tokens, False on padding

precision: by default the verdict is measured in float64 (or in the precision the loss computes in
  when it rounds float64 inputs), and the audit is run again in the training precisions below it,
  float32 and bfloat16 (bfloat16 where the loss accepts it); a check that conforms in float64 but
  differs there is a difference ("in float32 only: ..."), and a line per precision says where they
  disagree. exp(log r) overflowing that precision above log r = 88.7 is said, not counted: any loss
  that does not clamp log r does it. --dtype float64, float32, bfloat16 or float16 audits at that
  precision alone and counts everything.
allowance: one per precision, stated on the card: a difference from the paper up to that share of
  the on-policy gradient (float64 1e-9, float32 1e-4, float16 2e-2, bfloat16 5e-2) is rounding,
  whatever the check, and each difference above it is printed with its size; a clamp is credited
  when it changes no gradient by more than 1e-6 of the on-policy gradient (or the allowance).

before any reading, the loss is called
  twice on the same batch: a loss that answers differently (random, or keeping state across
    calls) cannot be audited (exit 2, one line);
  on the same batch reversed: the value and each token's gradient must not move (permuted);
  on each half of the batch alone: on its tokens the full batch's gradient must be the half's up
    to one positive factor (its share of the mean), and the full value the halves' values
    weighted by those factors.
  A loss that depends on the batch's order or size DIFFERS; that is said first, and the card's
  other lines then state measurements without naming causes. So does a term that does not
  depend on the advantage (a KL penalty, an entropy bonus: a nonzero gradient with every A = 0).
  A cause is named only when the whole card agrees with it (value, gradient, the shape across r,
  both signs of A).

the loss's own output (print, warnings, logging, native code writing to descriptors 1 and 2)
never reaches the card: it is counted, said in a note under the verdict, and not shown, so the
verdict stays the first line and --json stays valid JSON.

exit status: 0 conforms, 1 differs, 2 usage error, a loss that raises or is not finite on a plain
batch, a loss with no gradient in logp, a loss that is not deterministic, or --timeout reached

example:
  python -m sapo_lab conformance my_loss.py:sapo_loss --tau-pos 1.0 --tau-neg 1.05
  python -m sapo_lab conformance my_pkg.losses:sapo --details --json card.json --timeout 600

A conforming audit calls the loss about 100 times a precision, three precisions by default (up to
about 200 a precision when it differs); progress goes to stderr with --progress, and by itself
when one call takes 0.5 s or more.

With one update per rollout (--updates-per-rollout 1) every ratio is 1: SAPO's gradient then
equals GRPO's and tau has no effect; the off-policy checks describe reused rollouts."""

ON_POLICY_NOTE = ("on-policy (one update per rollout): every ratio is 1, so SAPO's gradient equals GRPO's and "
                  "tau has no effect; the off-policy checks apply when a rollout is reused")

DTYPE_NAMES = ("float64", "float32", "bfloat16", "float16")
# One call taking this long makes the audit minutes long: progress is then shown without --progress.
SLOW_CALL_S = 0.5


def add_flags(p) -> None:
    """The flags of ``python -m sapo_lab conformance`` on an argparse parser (raw-text help)."""
    p.description = DESCRIPTION
    p.epilog = EPILOG
    p.add_argument("target", help="MODULE:FUNCTION or path/to/file.py:FUNCTION")
    p.add_argument("--tau-pos", type=float, default=1.0, metavar="TAU",
                   help="temperature the loss uses for A > 0 (default 1.0)")
    p.add_argument("--tau-neg", type=float, default=1.05, metavar="TAU",
                   help="temperature the loss uses for A <= 0 (default 1.05)")
    p.add_argument("--dtype", default=None, choices=DTYPE_NAMES,
                   help="audit at this precision alone (default: float64, or the narrower one the loss computes "
                        "in, then float32 and bfloat16)")
    p.add_argument("--level", default="token", choices=("token", "sequence"), help="importance-sampling level expected")
    p.add_argument("--updates-per-rollout", type=int, default=None, metavar="N",
                   help="optimizer updates per rollout in your setting (1: on-policy, said in the verdict)")
    p.add_argument("--name", default=None, help="name on the card (default: the target)")
    p.add_argument("--details", action="store_true", help="print every check, not only the differences")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write the card as JSON to FILE (alone: print it instead of the text)")
    p.add_argument("--markdown", default=None, metavar="FILE", help="write the card as Markdown to FILE")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="stop with exit status 2 when the audit takes longer (default: no limit)")
    p.add_argument("--progress", action="store_true",
                   help="report progress on stderr (on by itself when one call of the loss takes >= 0.5 s)")


class ConformanceUsageError(ValueError):
    """A mistake on the command line or in the target: one line, exit status 2."""


class AuditTimeout(BaseException):
    """--timeout reached. A BaseException, so that the audit's per-probe ``except Exception`` lets it through."""


class LossExited(BaseException):
    """The loss raised SystemExit (or another BaseException but KeyboardInterrupt): the audit stops, exit status 2.
    A BaseException, so that the audit's per-probe ``except Exception`` lets it through."""


def _exit_words(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"raised {type(exc).__name__}" + (f": {str(exc).splitlines()[0]}" if str(exc).strip() else "")


def load_target(target: str):
    """The callable named by MODULE:FUNCTION (or FILE.py:FUNCTION)."""
    module_part, sep, attr_path = target.rpartition(":")
    if not sep or not module_part or not attr_path:
        raise ConformanceUsageError(f"target must be MODULE:FUNCTION, got {target!r}")
    try:
        if module_part.endswith(".py") or os.sep in module_part:
            if not os.path.isfile(module_part):
                raise ConformanceUsageError(f"no such file: {module_part}")
            name = os.path.splitext(os.path.basename(module_part))[0]
            spec = importlib.util.spec_from_file_location(name, module_part)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())  # a module in the working directory, as `python -m` finds it
            module = importlib.import_module(module_part)
    except ConformanceUsageError:
        raise
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # sys.exit() at import: the audit never ran, which must not read as a pass
        if not isinstance(exc, Exception):
            raise ConformanceUsageError(f"cannot import {module_part!r}: it {_exit_words(exc)} while importing; "
                                        "nothing was audited") from None
        # ImportError, or anything the user's module raises while importing
        msg = str(exc).strip().splitlines()
        raise ConformanceUsageError(f"cannot import {module_part!r}: {type(exc).__name__}: "
                                    f"{msg[0] if msg else ''}".rstrip(": ")) from None
    obj = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ConformanceUsageError(f"{module_part!r} has no attribute {attr_path!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConformanceUsageError(f"{target} is not callable (a {type(obj).__name__})")
    return obj


# ---- progress and the time limit ----

# The audit's functions that call the loss, innermost first, and the check each one serves.
STAGES = {
    "finite_differences": "finite differences of the value", "_kink_probe": "finite differences, one-sided",
    "check_adapter": "the plainest batch", "preflight": "the plainest batch: gradient and precision",
    "identify": "aggregation", "shape_rows": "gate shape and temperatures",
    "_temperature_zero_row": "temperature for A = 0", "on_policy_rows": "on-policy gradient",
    "_old_logp_row": "behaviour log-probs", "closed_form_rows": "per-token gradient", "level_row": "level",
    "extreme_row": "extreme log-ratios", "zero_advantage_row": "zero advantages", "_empty_response_row": "empty response",
    "_empty_batch_row": "batch without tokens", "check_deterministic": "the same batch twice",
    "check_still_deterministic": "the first batch again, after every check",
    "batch_row": "batch order and size",
}


def _stage() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in STAGES:
            return STAGES[frame.f_code.co_name]
        frame = frame.f_back
    return "checks"


class WatchedLoss:
    """The user's loss, counted and timed: stops the audit at its deadline and reports progress on ``stream``."""

    def __init__(self, fn, timeout: float | None = None, progress: bool = False, stream=None):
        functools.update_wrapper(self, fn, updated=())  # the signature and the name stay the loss's own
        self.fn, self.timeout, self.progress, self.stream = fn, timeout, progress, stream or sys.stderr
        self.start = time.monotonic()
        self.calls, self.first_call_s, self.stage = 0, None, None

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def check_deadline(self) -> None:
        if self.timeout is not None and self.elapsed() >= self.timeout:
            raise AuditTimeout

    def say(self, text: str) -> None:
        print(f"conformance: {text}", file=self.stream, flush=True)

    def __call__(self, *args, **kwargs):
        self.check_deadline()
        stage = _stage()
        if self.progress and stage != self.stage:
            self.say(f"{stage} (call {self.calls + 1}, {self.elapsed():.1f} s)")
        if stage != self.stage and isinstance(self.stream, _PipeWriter):  # for the parent, should the child vanish
            _send(self.stream.pipe, {"stage": stage})
        self.stage = stage
        t0 = time.monotonic()
        self.calls += 1
        try:
            out = self.fn(*args, **kwargs)  # an exception passes through: the audit makes it a row
        except (Exception, KeyboardInterrupt, AuditTimeout):
            raise
        except BaseException as exc:  # SystemExit: exit status 0 or 1 would read as CONFORMS or DIFFERS
            raise LossExited(f"the loss {_exit_words(exc)} on call {self.calls} (during: {stage}); nothing was "
                             "audited: a loss must return a scalar tensor") from None
        if self.first_call_s is None:
            self.first_call_s = time.monotonic() - t0
            if not self.progress and self.first_call_s >= SLOW_CALL_S:
                self.progress = True
                self.say(f"one call of the loss took {self.first_call_s:.1f} s and the audit makes about 300 "
                         "to 600; progress follows (--timeout SECONDS limits the audit)")
        return out

    def timeout_message(self) -> str:
        stage = self.stage or "the first call"
        return (f"the audit did not finish within --timeout {self.timeout:g} s (calls of the loss begun: "
                f"{self.calls}, {self.elapsed() / max(self.calls, 1):.2g} s each on average; during: {stage}); "
                "raise --timeout or make the loss faster")


@contextlib.contextmanager
def _alarm(seconds: float | None):
    """Interrupt even a single call that outlasts ``seconds`` (Unix, main thread); elsewhere the deadline is checked
    before each call."""
    import signal

    if seconds is None or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise AuditTimeout

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---- the command ----

def _check_flags(args) -> None:
    for flag, tau in (("--tau-pos", args.tau_pos), ("--tau-neg", args.tau_neg)):
        if not (math.isfinite(tau) and tau > 0):
            raise ConformanceUsageError(f"{flag} must be a finite number > 0, got {tau}")
    updates = getattr(args, "updates_per_rollout", None)
    if updates is not None and updates < 1:
        raise ConformanceUsageError(f"--updates-per-rollout must be >= 1, got {updates}")
    timeout = getattr(args, "timeout", None)
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise ConformanceUsageError(f"--timeout must be a finite number of seconds > 0, got {timeout}")


def run_conformance(args) -> int:
    """Audit ``args.target`` (flags of ``python -m sapo_lab conformance``); print the verdict; 0 conforms, 1 differs.

    Usage mistakes, a loss that raises or is not finite on the plainest batch, one with no gradient in logp, one
    that exits (sys.exit, or os._exit, which ends its process), and a reached --timeout raise
    :class:`ConformanceUsageError`, which the command line reports in one line (exit 2). Where the system can fork,
    the user's code runs in a child process, so that a loss ending its process is reported, not taken for a pass.
    """
    _check_flags(args)
    if not hasattr(os, "fork"):
        return _audit_and_print(args)
    return _in_child(functools.partial(_audit_and_print, descriptors=True), args)


class _PipeWriter:
    """sys.stdout or sys.stderr in the child: each write goes to the parent as one JSON line."""

    def __init__(self, pipe, stream: str):
        self.pipe, self.stream = pipe, stream

    def write(self, text: str) -> int:
        if text:
            _send(self.pipe, {self.stream: text})
        return len(text)

    def flush(self) -> None:
        pass


def _send(pipe, message: dict) -> None:
    import json

    os.write(pipe, (json.dumps(message) + "\n").encode())


def _in_child(work, args) -> int:
    """``work(args)`` in a forked child; its output, its exit status or its one-line error come back through a pipe.
    A child that ends without a word (os._exit, a crash in native code) is one line, exit status 2."""
    import json
    import traceback

    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        code = 0
        try:
            sys.stdout, sys.stderr = _PipeWriter(write_end, "out"), _PipeWriter(write_end, "err")
            _send(write_end, {"status": work(args)})
        except ConformanceUsageError as exc:
            _send(write_end, {"usage": str(exc)})
        except KeyboardInterrupt:
            _send(write_end, {"interrupted": True})
        except BaseException:  # an internal error: its traceback goes to the parent
            _send(write_end, {"internal": traceback.format_exc()})
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    final, stage = None, None
    try:
        with os.fdopen(read_end, "rb") as pipe:
            for raw in pipe:
                message = json.loads(raw)
                if "out" in message:
                    sys.stdout.write(message["out"])
                elif "err" in message:
                    sys.stderr.write(message["err"])
                    sys.stderr.flush()
                elif "stage" in message:
                    stage = message["stage"]
                else:
                    final = message
    finally:
        _, wait_status = os.waitpid(pid, 0)
    if final is None:
        ended = (f"signal {-os.waitstatus_to_exitcode(wait_status)}" if os.WIFSIGNALED(wait_status)
                 else f"exit status {os.waitstatus_to_exitcode(wait_status)}")
        raise ConformanceUsageError(
            f"the loss ended the audit's process ({ended}, during: {stage or 'loading the target'}) without "
            "returning, e.g. os._exit() or a crash in native code; nothing was audited: a loss must return a scalar "
            "tensor")
    if "usage" in final:
        raise ConformanceUsageError(final["usage"])
    if "interrupted" in final:
        raise KeyboardInterrupt
    if "internal" in final:
        raise RuntimeError(f"internal error in the audit:\n{final['internal']}")
    return final["status"]


class _CountingSink:
    """Stands for sys.stdout or sys.stderr while the user's code runs: counts what it writes, keeps none of it."""

    def __init__(self):
        self.lines, self.chars, self.open_line = 0, 0, False

    def write(self, text: str) -> int:
        if text:
            self.chars += len(text)
            self.lines += text.count("\n")
            self.open_line = not text.endswith("\n")
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def written_lines(self) -> int:
        return self.lines + int(self.open_line)


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers, so that what native code printed lands while its output is still redirected."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask: what it buffered is flushed at exit
        pass


class LossOutput:
    """Keeps the user's output off the card: sys.stdout and sys.stderr are counted, not shown, and with
    ``descriptors`` the file descriptors 1 and 2 too (native code, subprocesses), into a temporary file.

    Descriptors are redirected only where the audit's own output does not go through them (the forked child
    writes to its parent through a pipe)."""

    def __init__(self, descriptors: bool):
        self.descriptors = descriptors
        self.sink = _CountingSink()
        self.fd_lines = 0

    def __enter__(self):
        import tempfile

        self.saved_streams = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = self.sink
        if self.descriptors:
            for stream in (sys.__stdout__, sys.__stderr__):
                if stream is not None:
                    stream.flush()
            self.file = tempfile.TemporaryFile()
            self.saved_fds = [os.dup(1), os.dup(2)]
            os.dup2(self.file.fileno(), 1)
            os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc) -> None:
        sys.stdout, sys.stderr = self.saved_streams
        if not self.descriptors:
            return
        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        _flush_c_stdio()
        for fd, saved in zip((1, 2), self.saved_fds, strict=True):
            os.dup2(saved, fd)
            os.close(saved)
        self.file.seek(0)
        last = b"\n"
        for chunk in iter(lambda: self.file.read(1 << 16), b""):
            self.fd_lines += chunk.count(b"\n")
            last = chunk[-1:]
        self.fd_lines += int(last != b"\n")
        self.file.close()

    def lines(self) -> int:
        return self.sink.written_lines() + self.fd_lines

    def note(self) -> str:
        """How much the user's code printed, for the card ('' when nothing)."""
        n = self.lines()
        if not n:
            return ""
        return f"the loss (with its module) printed {n:,} line{'s' if n != 1 else ''} on stdout and stderr; not shown"


def _audit_and_print(args, descriptors: bool = False) -> int:
    updates = getattr(args, "updates_per_rollout", None)
    output = LossOutput(descriptors)
    with output:
        loss_fn = load_target(args.target)
    from .engine import AdapterError, audit  # torch is imported here, not for --help

    watched = WatchedLoss(loss_fn, getattr(args, "timeout", None), getattr(args, "progress", False))
    try:
        with _alarm(watched.timeout), output:
            card = audit(watched, name=args.name or args.target, tau_pos=args.tau_pos, tau_neg=args.tau_neg,
                         dtype=getattr(args, "dtype", None), level=args.level, meta={"updates_per_rollout": updates})
    except AdapterError as exc:
        raise ConformanceUsageError(str(exc)) from None
    except AuditTimeout:
        raise ConformanceUsageError(watched.timeout_message()) from None
    except LossExited as exc:
        raise ConformanceUsageError(str(exc)) from None
    if output.note():
        card.meta["loss_output"] = output.note()
    if watched.progress:
        watched.say(f"done: {watched.calls} calls in {watched.elapsed():.1f} s")
    json_path = getattr(args, "json", None)
    for path, text in ((None if json_path == "-" else json_path, card.to_json), (args.markdown, card.to_markdown)):
        if path:
            try:
                with open(path, "w") as f:
                    f.write(text() + ("\n" if path == json_path else ""))
            except OSError as exc:
                raise ConformanceUsageError(f"cannot write {path}: {exc.strerror}") from None
    if json_path == "-":
        print(card.to_json())
    else:
        notes = (ON_POLICY_NOTE,) if updates == 1 else ()
        print(card.to_text(details=getattr(args, "details", False), notes=notes), end="")
    return 0 if card.passed else 1

