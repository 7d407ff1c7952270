"""``python -m sapo_lab conformance MODULE:FUNCTION``: audit a user's SAPO loss and print its verdict.

MODULE is an importable module name or a path to a ``.py`` file; FUNCTION may be dotted
(``losses:Sapo.loss``). The first line is ``CONFORMS`` or ``DIFFERS in N of M checks``, then
one line per difference; ``--details`` prints every check, ``--json`` the card as JSON.
Exit status: 0 conforms, 1 differs, 2 a usage error or a loss that cannot be audited (one line
on stderr).

Before the audit, the command line makes sure the loss can be audited at all (a finite value and
a gradient in ``logp`` on the plainest batch) and at which precision it computes: a loss that
rounds its float64 inputs to float32 is audited in float32, where its rounding is no difference.
After it, the card's measured numbers are read for the causes a user needs named first (a ratio
clamp with its thresholds, a gate on log r, tau chosen by the side of r = 1, a 2/tau prefactor),
and the value-versus-gradient check is told apart from a kink of a hard clamp and from a
surrogate whose gradient is the paper's.
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
  dtype: float64 by default, or the precision the loss computes in when it rounds float64 inputs
         (--dtype float32, bfloat16, float16: tolerances follow the dtype)

exit status: 0 conforms, 1 differs, 2 usage error, a loss that raises or is not finite on a plain
batch, a loss with no gradient in logp, or --timeout reached

example:
  python -m sapo_lab conformance my_loss.py:sapo_loss --tau-pos 1.0 --tau-neg 1.05
  python -m sapo_lab conformance my_pkg.losses:sapo --details --json card.json --timeout 600

A conforming audit calls the loss about 90 times (up to about 200 when it differs); progress goes
to stderr with --progress, and by itself when one call takes 0.5 s or more.

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
                   help="precision of the probes (default float64, or the narrower one the loss computes in)")
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
    except Exception as exc:  # ImportError, or anything the user's module raises while importing
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
    "_empty_batch_row": "batch without tokens",
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
        self.stage = stage
        t0 = time.monotonic()
        self.calls += 1
        out = self.fn(*args, **kwargs)  # an exception passes through: the audit makes it a row
        if self.first_call_s is None:
            self.first_call_s = time.monotonic() - t0
            if not self.progress and self.first_call_s >= SLOW_CALL_S:
                self.progress = True
                self.say(f"one call of the loss took {self.first_call_s:.1f} s and the audit makes about 90 "
                         "to 200; progress follows (--timeout SECONDS limits the audit)")
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


# ---- before the audit: can the loss be audited, and in which precision does it compute? ----

PLAIN_LOG_RATIOS, PLAIN_ADVANTAGES = ([[0.25, -0.5], [0.5]], [1.0, -1.0])  # the batch check_adapter calls first
# Ratios within 3 % of 1, inside any clamp a SAPO loss would carry, so that every token has a gradient to watch.
NEAR_ONE_LOG_RATIOS = [[2.0**-6, -(2.0**-6)], [2.0**-5]]
# A relative change of every log-prob that the dtype rounds away and every wider one keeps: a loss whose value
# and gradient do not move under it computes in that dtype (or a narrower one), whatever dtype it returns.
BELOW_RESOLUTION = {"float32": 2.0**-27, "float16": 2.0**-14, "bfloat16": 2.0**-10}
NARROWER = {"float64": ("float32", "float16", "bfloat16"), "float32": ("float16", "bfloat16")}


def _probe(fn, batch, dtype):
    """(value, gradient in logp, whether the value is attached to logp's graph), or None if the loss raised."""
    import torch

    logp = batch.logp.to(dtype).requires_grad_(True)
    try:
        out = fn(logp, batch.old.to(dtype), batch.adv.to(dtype), batch.mask)
        value = out.detach().double().reshape(())
        attached = out.requires_grad
        grad = torch.autograd.grad(out.reshape(()), logp, allow_unused=True)[0] if attached else None
    except Exception:  # the audit's own rows report what raises; this probe only looks for the plainest facts
        return None
    grad = torch.zeros_like(batch.logp) if grad is None else grad.detach().double()
    return value, grad, attached


def _scaled(batch, factor):
    from .probes import Batch

    return Batch(batch.logp * factor, batch.old * factor, batch.adv, batch.mask)


def preflight(fn, dtype_name: str | None) -> tuple[str, str]:
    """The dtype to audit at and a note, or ConformanceUsageError when the loss cannot be audited.

    ``dtype_name`` None means float64 unless the loss computes in a narrower precision.
    """
    import torch

    from .probes import DTYPES, make_batch

    asked = dtype_name or "float64"
    dtype = DTYPES[asked]
    plain = make_batch(PLAIN_LOG_RATIOS, PLAIN_ADVANTAGES, 2)
    on_policy = make_batch([[0.0] * len(z) for z in PLAIN_LOG_RATIOS], PLAIN_ADVANTAGES, 2)
    first, at_one = _probe(fn, plain, dtype), _probe(fn, on_policy, dtype)
    where = "on the plainest batch (log r 0.25, -0.5 and 0.5, A = +1 and -1)"
    for probe, batch in ((first, plain), (at_one, on_policy)):
        if probe is None:
            continue
        value, grad, _ = probe
        tokens = grad[batch.mask]
        if not math.isfinite(float(value)) or not bool(torch.isfinite(tokens).all()):
            bad = int((~torch.isfinite(tokens)).sum())
            raise ConformanceUsageError(
                f"the loss is not finite {where if batch is plain else 'at r = 1'}: value {float(value)}, "
                f"{bad} of {tokens.numel()} token gradients non-finite; nothing can be audited until it is")
    if at_one is not None and float(at_one[1].abs().max()) == 0.0:
        if not at_one[2]:
            raise ConformanceUsageError(
                "no gradient reaches logp: the loss is not attached to logp's graph (computed under torch.no_grad(), "
                "or from logp.detach()), so training would not move the policy")
        if first is not None and float(first[1].abs().max()) == 0.0:
            raise ConformanceUsageError(
                "the gradient in logp is exactly 0 (SAPO's is -A r w(r) / L): logp cancels out of the loss, e.g. "
                "old_logp taken from logp without detach, so that r = exp(logp - logp) = 1 carries no gradient")
        raise ConformanceUsageError(
            "the gradient in logp is exactly 0 at r = 1, where SAPO's is -A / L for every tau: the audit measures "
            "every property against that on-policy gradient and cannot proceed")
    narrower = None
    near = make_batch(NEAR_ONE_LOG_RATIOS, PLAIN_ADVANTAGES, 2)
    reference = _probe(fn, near, dtype) if NARROWER.get(asked) else None
    if reference is not None and bool((reference[1][near.mask] != 0).all()):  # no gradient held at 0 by a clamp
        control = _probe(fn, make_batch([[2 * z for z in zs] for zs in NEAR_ONE_LOG_RATIOS], PLAIN_ADVANTAGES, 2),
                         dtype)  # log ratios doubled: a change every dtype keeps
        if control is None or (torch.equal(control[0], reference[0]) and torch.equal(control[1], reference[1])):
            return asked, ""  # the outputs do not follow the inputs at all (r held at 1): no evidence either way
        for name in NARROWER[asked]:
            moved = _probe(fn, _scaled(near, 1.0 + BELOW_RESOLUTION[name]), dtype)
            if moved is None or not (torch.equal(moved[0], reference[0]) and torch.equal(moved[1], reference[1])):
                break
            narrower = name
    if narrower is None:
        return asked, ""
    evidence = (f"its value and gradient do not move when every {asked} log-prob changes by a relative "
                f"{BELOW_RESOLUTION[narrower]:.2g}, which {narrower} rounds away")
    if dtype_name is not None:
        raise ConformanceUsageError(
            f"the loss computes in {narrower} ({evidence}): a {asked} audit would report {narrower} rounding as "
            f"differences; rerun with --dtype {narrower}")
    return narrower, (f"the loss computes in {narrower} ({evidence}): audited in {narrower} (--dtype {narrower}), "
                      f"where its rounding is no difference")


# ---- after the audit: causes named from the card's numbers ----

def _near(measured, expected, tol: float) -> bool:
    import torch

    return bool(torch.isfinite(measured).all()) and float((measured - expected).abs().max()) <= tol * max(
        1.0, float(expected.abs().max()))


def _shape_values(card):
    """Per sign of A: (ratios, measured g(r)/g(1), tau) from the gate-shape row, when it measured both."""
    import torch

    from .names import GATE_SHAPE

    values = card.row(GATE_SHAPE).values
    out = {}
    for label, tau in (("A > 0", card.tau_pos), ("A < 0", card.tau_neg)):
        v = values.get(label) if isinstance(values, dict) else None
        if not v or "ratios" not in v:
            return {}
        out[label] = (torch.tensor(v["ratios"], dtype=torch.float64),
                      torch.tensor([float(x) for x in v["measured"]], dtype=torch.float64), tau)
    return out


def _clamp_cause(card, shape, tol: float) -> str:
    """A clamp of r (or log r) with its thresholds, from the extreme-ratio row's bisection, when the gradient is the
    paper's inside the clamp and exactly 0 outside."""
    from .names import EXTREME
    from .probes import update_coefficient

    ext = card.row(EXTREME).values
    sides = {}
    for label in ("A > 0", "A < 0"):
        for side in ("lower", "upper"):
            v = ext.get(label, {}).get(side) if isinstance(ext, dict) else None
            if v and v.get("kind") == "zero" and not v.get("harmless"):
                sides.setdefault((side, round(float(v["threshold"]), 4)), []).append(label)
    if not sides:
        return ""
    for r, rho, tau in shape.values():
        paper = update_coefficient(r, tau) / update_coefficient(r[:1], tau)
        inside = rho != 0
        if not _near(rho[inside], paper[inside], tol):
            return ""
    parts = []
    for (side, z), labels in sorted(sides.items(), key=lambda kv: kv[0][1]):
        word = "below" if side == "lower" else "above"
        parts.append(f"{word} r = {math.exp(z):.4g} (log r {z:+.4f}) for {' and '.join(labels)}")
    return "a clamp of the ratio (of r or log r): gradient 0 " + "; ".join(parts)


def _gate_cause(shape, card, tol: float) -> str:
    """A gate on log r, or tau chosen by the side of r = 1, when one of them reproduces the measured shape."""
    import torch

    from .probes import update_coefficient

    if not shape:
        return ""
    log_gate = all(_near(rho, 1.0 / torch.cosh(tau * torch.log(r) / 2) ** 2, tol) for r, rho, tau in shape.values())
    if log_gate:
        return ("the gate is on log r, sigmoid(tau log r), not on r - 1: its gradient sech^2(tau log r / 2) lacks "
                "the paper's factor r")

    def by_side(r):
        side_tau = torch.where(r > 1, torch.tensor(card.tau_pos, dtype=torch.float64),
                               torch.tensor(card.tau_neg, dtype=torch.float64))
        return update_coefficient(r, side_tau)

    if card.tau_pos != card.tau_neg and all(_near(rho, by_side(r), tol) for r, rho, _ in shape.values()):
        return ("tau chosen by the side of r = 1 (tau_pos where r > 1, tau_neg where r < 1), not by the sign of A "
                f"(tau_pos = {card.tau_pos:g} for A > 0, tau_neg = {card.tau_neg:g} for A <= 0)")
    return ""


def _kink_probe(fn, dtype, step: float):
    """Central, forward and backward differences of the value on the closed-form probe, and autograd's gradient."""
    import torch

    from .gradient import CLOSED_FORM_ADVANTAGES, CLOSED_FORM_LOG_RATIOS
    from .probes import Batch, call, make_batch

    batch = make_batch([list(z) for z in CLOSED_FORM_LOG_RATIOS], list(CLOSED_FORM_ADVANTAGES))
    base = call(fn, batch, dtype)
    if base.error or not math.isfinite(base.value):
        return None
    fwd, bwd = torch.zeros_like(batch.logp), torch.zeros_like(batch.logp)
    for i, t in zip(*torch.nonzero(batch.mask, as_tuple=True), strict=True):
        vals = []
        for sign in (1.0, -1.0):
            shifted = batch.logp.clone()
            shifted[i, t] += sign * step
            m = call(fn, Batch(shifted, batch.old, batch.adv, batch.mask), dtype, grad=False)
            if m.error or not math.isfinite(m.value):
                return None
            vals.append(m.value)
        fwd[i, t], bwd[i, t] = (vals[0] - base.value) / step, (base.value - vals[1]) / step
    return batch, base, fwd, bwd


def _kink_reading(card, fn, tol) -> str:
    """When the value-vs-gradient check failed only where the value has a kink (a hard clamp's threshold), the text
    that check should say; else ''."""
    import torch

    from .probes import DTYPES

    probe = _kink_probe(fn, DTYPES[card.dtype], tol.fd_step)
    if probe is None:
        return ""
    batch, base, fwd, bwd = probe
    grad = torch.where(batch.mask, base.grad, torch.zeros_like(base.grad))
    scale = float(grad.abs().max()) or 1.0
    kink = batch.mask & ((fwd - bwd).abs() > 0.05 * scale)
    if not bool(kink.any()):
        return ""
    smooth = batch.mask & ~kink
    central = (fwd + bwd) / 2
    if bool(smooth.any()) and float((central - grad)[smooth].abs().max()) > tol.fd * scale:
        return ""
    # at a kink autograd takes one side's slope: far closer to it than the jump between the two sides
    one_side = torch.minimum((grad - fwd).abs(), (grad - bwd).abs()) <= 0.1 * (fwd - bwd).abs()
    if not bool(one_side[kink].all()):
        return ""
    z = sorted({round(float(base.log_ratio[i, t]), 4) for i, t in zip(*torch.nonzero(kink, as_tuple=True),
                                                                      strict=True)})
    return (f"matches the applied gradient except at {int(kink.sum())} token(s) on a kink of the value (log r = "
            f"{', '.join(f'{x:+g}' for x in z)}: a hard clamp's threshold), where autograd takes one side's slope")


def explain(card, fn) -> None:
    """Name, in the card's own rows, the causes its numbers show (see the module's docstring)."""
    from .names import FINITE_DIFFERENCES, GATE_SHAPE, GRADIENT, ON_POLICY
    from .probes import DTYPES, TOLERANCES

    tol = TOLERANCES[DTYPES[card.dtype]]
    hint_tol = max(20 * tol.grad, 1e-6)  # a cause is a reading of measured ratios: float32-held taus included
    on_policy, shape_row, fd, grad = (card.row(p) for p in (ON_POLICY, GATE_SHAPE, FINITE_DIFFERENCES, GRADIENT))
    k = (on_policy.values.get("factor_pos"), on_policy.values.get("factor_neg"))
    if on_policy.verdict == "differs" and all(isinstance(x, float) and abs(x - 0.5) <= hint_tol for x in k):
        on_policy.summary = (f"on-policy gradient factor {k[0]:.4g} / {k[1]:.4g} instead of 1: a 2/tau prefactor "
                             "where the paper has 4/tau (or the loss halved)")
    if shape_row.verdict == "differs":
        shape = _shape_values(card)
        cause = _clamp_cause(card, shape, hint_tol) or _gate_cause(shape, card, hint_tol)
        if cause:
            shape_row.summary = f"gradient shape: {cause}"
    if fd.verdict == "differs":
        kink = _kink_reading(card, fn, tol)
        if kink:
            fd.verdict, fd.measured, fd.summary = "pass", kink, ""
            fd.detail = (fd.detail.split(";")[0] + "; forward and backward differences disagree only at the kink, "
                         "and elsewhere the central difference is the applied gradient")
        elif all(card.row(p).verdict == "pass" for p in (GRADIENT, ON_POLICY, GATE_SHAPE)):
            fd.verdict = "info"
            fd.summary = (f"gradient-equivalent: the applied gradient is the paper's (per-token {grad.measured}), "
                          f"but the value is not its objective, a detached weight (the value's derivative is off by "
                          f"{fd.measured}): training follows the paper; a logged loss value is not SAPO's")


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

    Usage mistakes, a loss that raises or is not finite on the plainest batch, one with no gradient in logp, and
    a reached --timeout raise :class:`ConformanceUsageError`, which the command line reports in one line (exit 2).
    """
    _check_flags(args)
    updates = getattr(args, "updates_per_rollout", None)
    loss_fn = load_target(args.target)
    from .engine import AdapterError, audit, check_adapter  # torch is imported here, not for --help
    from .probes import DTYPES

    watched = WatchedLoss(loss_fn, getattr(args, "timeout", None), getattr(args, "progress", False))
    try:
        with _alarm(watched.timeout):
            dtype = getattr(args, "dtype", None)
            check_adapter(watched, DTYPES[dtype or "float64"])
            dtype, precision_note = preflight(watched, dtype)
            card = audit(watched, name=args.name or args.target, tau_pos=args.tau_pos, tau_neg=args.tau_neg,
                         dtype=dtype, level=args.level, meta={"updates_per_rollout": updates})
            explain(card, watched)
    except AdapterError as exc:
        raise ConformanceUsageError(str(exc)) from None
    except AuditTimeout:
        raise ConformanceUsageError(watched.timeout_message()) from None
    if watched.progress:
        watched.say(f"done: {watched.calls} calls in {watched.elapsed():.1f} s")
    if precision_note:
        card.meta["precision"] = precision_note
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
        text = card.to_text(details=getattr(args, "details", False), notes=notes)
        if precision_note:  # said right under the verdict: it is what the verdict was measured at
            from .card import wrap

            verdict, rest = text.split("\n", 1)
            text = "\n".join([verdict, *wrap(precision_note, "    ", "  note: "), rest])
        print(text, end="")
    return 0 if card.passed else 1

