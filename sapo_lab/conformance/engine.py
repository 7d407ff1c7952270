"""``audit(loss_fn, ...)``: run every check on one SAPO loss and return its report card."""

from __future__ import annotations

import inspect
import math
import platform

import torch

from .card import ReportCard
from .consistency import batch_row, check_deterministic, check_still_deterministic
from .context import (
    AGGREGATION,
    BATCH,
    EMPTY_BATCH,
    EMPTY_RESPONSE,
    EXTREME,
    FINITE_DIFFERENCES,
    GATE_SHAPE,
    GRADIENT,
    LEVEL,
    OLD_LOGP,
    ON_POLICY,
    PADDING,
    ROW_ORDER,
    TEMPERATURE_NEG,
    TEMPERATURE_POS,
    TEMPERATURE_ZERO,
    VALUE_AT_ONE,
    ZERO_ADVANTAGE,
    Context,
)
from .extreme import MATERIAL, clamp_cause, extreme_row
from .gradient import closed_form_rows, on_policy_rows, shape_rows
from .names import FINDING_LEVELS
from .preflight import PLAIN_ADVANTAGES, PLAIN_LOG_RATIOS, AdapterError, preflight
from .probes import DTYPES, TOLERANCES, call, make_batch
from .structure import aggregation_row, empty_rows, level_row, zero_advantage_row

LEVELS = ("token", "sequence")
ADAPTER_ARGS = "(logp, old_logp, advantages, mask)"


def _callable_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def check_adapter(loss_fn, dtype=torch.float64, device=None) -> None:
    """Raise AdapterError unless ``loss_fn(logp, old_logp, advantages, mask)`` can be called and returns a scalar.

    The first call is the plainest batch (two on-policy-ish responses of 2 and 1 tokens, A = +-1): a
    loss that raises on it cannot be audited, and the error names the exception in one line. Exceptions
    on later, harder probes (an empty batch, extreme ratios) become rows.
    """
    name = _callable_name(loss_fn)
    if not callable(loss_fn):
        raise AdapterError(f"{name} is not callable (a {type(loss_fn).__name__})")
    try:
        sig = inspect.signature(loss_fn)
    except (TypeError, ValueError):
        sig = None  # some builtins have no signature: the first call decides
    if sig is not None:
        try:
            sig.bind(None, None, None, None)
        except TypeError:
            raise AdapterError(f"{name} must accept {ADAPTER_ARGS}; its signature is {sig}") from None
    m = call(loss_fn, make_batch(PLAIN_LOG_RATIOS, PLAIN_ADVANTAGES, 2), dtype, device)
    if m.error and m.error.startswith("returned"):
        raise AdapterError(f"{name} {m.error}")
    if m.error:
        raise AdapterError(f"calling {name}{ADAPTER_ARGS} on a plain batch raised {m.error}")


def audit(loss_fn, name: str = "loss", tau_pos: float = 1.0, tau_neg: float = 1.05, dtype=None, *,
          level: str = "token", device=None, meta: dict | None = None,
          finding_level: str = "function") -> ReportCard:
    """Audit ``loss_fn(logp, old_logp, advantages, mask) -> scalar`` against SAPO as the paper defines it.

    ``logp``/``old_logp``: (B, T) per-token log-probs (``logp`` requires grad); ``advantages``:
    (B,), one per response; ``mask``: (B, T) bool. ``tau_pos``/``tau_neg``: the temperatures the
    loss was configured with. ``dtype``: the precision of the probes (a torch dtype or its
    name; tolerances follow it), audited alone; None audits in float64, or in the narrower precision the loss
    computes in, said in ``card.meta["precision"]``, and then again in the training precisions below it (float32,
    bfloat16 where the loss accepts it), compared row by row in ``card.precisions``. ``level``: "token" (the
    paper) or "sequence" when auditing a sequence-level variant. ``device``: where the probe tensors live. ``meta``: stored on the
    card as given (framework version, settings). ``finding_level``: "function" when the loss is
    called with the audit's arguments as they are, "training" when an adapter calls it as the
    framework's trainer does. Raises AdapterError when the callable cannot be called that way,
    raises or is not finite on the plainest batch, puts no gradient into ``logp``, computes
    in a narrower dtype than the one asked for (:mod:`.preflight`), or answers the same batch differently on two
    calls (:mod:`.consistency`); every other failure becomes a row with verdict "error".
    """
    if isinstance(dtype, torch.dtype):
        if dtype not in TOLERANCES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype}")
        dtype = next(k for k, v in DTYPES.items() if v == dtype)
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    for label, tau in (("tau_pos", tau_pos), ("tau_neg", tau_neg)):
        if not (isinstance(tau, int | float) and math.isfinite(tau) and tau > 0):
            raise ValueError(f"{label} must be a finite number > 0, got {tau!r}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if finding_level not in FINDING_LEVELS:
        raise ValueError(f"finding_level must be one of {tuple(FINDING_LEVELS)}, got {finding_level!r}")
    card = _audit_at(loss_fn, name, float(tau_pos), float(tau_neg), dtype, level, device, meta, finding_level)
    if dtype is None:  # the training precisions too, unless one dtype was asked for
        card.precisions = _training_precisions(loss_fn, card, device, finding_level)
    return card


def _audit_at(loss_fn, name, tau_pos, tau_neg, dtype, level, device, meta, finding_level) -> ReportCard:
    """Every check at one precision (``dtype`` None: float64 or the narrower one the loss computes in)."""
    check_adapter(loss_fn, DTYPES[dtype or "float64"], device)
    dtype_name, precision = preflight(loss_fn, dtype, device)
    dtype = DTYPES[dtype_name]

    ctx = Context(loss_fn, tau_pos, tau_neg, dtype, device, level)
    first = check_deterministic(ctx)  # before any reading: a loss that answers twice differently cannot be audited
    rows = {BATCH: batch_row(ctx)}
    rows[AGGREGATION] = aggregation_row(ctx)  # then the aggregation: later checks use its weights
    # then the temperatures (a tau held in float32 sets float32's tolerances for what follows)
    rows[GATE_SHAPE], rows[TEMPERATURE_POS], rows[TEMPERATURE_NEG], rows[TEMPERATURE_ZERO] = shape_rows(ctx)
    rows[ON_POLICY], rows[VALUE_AT_ONE] = on_policy_rows(ctx)  # then the measured on-policy factors
    rows[GRADIENT], rows[FINITE_DIFFERENCES], rows[PADDING], rows[OLD_LOGP] = closed_form_rows(ctx)
    if ctx.constant_factor_summary and rows[FINITE_DIFFERENCES].verdict == "differs":
        rows[ON_POLICY].summary = ctx.constant_factor_summary
    rows[LEVEL] = level_row(ctx)
    rows[EXTREME] = extreme_row(ctx)
    clamp = clamp_cause(rows[GATE_SHAPE], rows[EXTREME], tau_pos, tau_neg, ctx.tol)
    if clamp:  # the shape's cause, now that the extreme ratios located the clamp's thresholds
        rows[GATE_SHAPE].summary = f"gradient shape: {clamp}"
    rows[ZERO_ADVANTAGE] = zero_advantage_row(ctx)
    zero_tau = rows[TEMPERATURE_ZERO]
    if zero_tau.verdict == "differs" and "advantage_shift" not in rows[ZERO_ADVANTAGE].values:
        zero_tau.summary = f"{TEMPERATURE_ZERO}: {zero_tau.measured}"  # the shift is not confirmed by the A = 0 group
    rows[EMPTY_RESPONSE], rows[EMPTY_BATCH] = empty_rows(ctx)
    check_still_deterministic(ctx, first)  # state that changed partway would make the rows read two losses
    lead = leading_finding(rows)
    if lead:
        measurements_only(rows, lead)

    from .._version import __version__

    versions = {"sapo_lab": __version__, "torch": torch.__version__, "python": platform.python_version()}
    meta = {**(meta or {}), **({"precision": precision} if precision else {})}
    meta["allowance"] = allowance_text(dtype_name, ctx.tol.grad, ctx.held_dtype)
    if ctx.changed_inputs:
        names = ", ".join(n for n in ("logp", "old_logp", "advantages", "mask") if n in ctx.changed_inputs)
        meta["changes_inputs"] = (f"the loss changes its arguments in place ({names}): the audit gave it copies, so "
                                  "its checks stand, but in training it would change the trainer's own tensors")
    return ReportCard(name, tau_pos, tau_neg, dtype_name, level, [rows[p] for p in ROW_ORDER],
                      versions, meta, finding_level, lead=lead)


def allowance_text(dtype_name: str, allowance: float, held_dtype=None) -> str:
    """The allowance line; loosened to ``held_dtype``'s when the loss holds its temperatures in that dtype."""
    own = TOLERANCES[DTYPES[dtype_name]].grad
    loosened = ""
    if allowance > own and held_dtype is not None:
        held = str(held_dtype).removeprefix("torch.")
        loosened = (f" (loosened from {dtype_name}'s {own:.0e} to {held}'s: the loss holds its temperatures in "
                    f"{held}, whose rounding is no difference)")
    return (f"allowance ({dtype_name}): a difference up to {allowance:.0e} of the on-policy gradient is rounding"
            f"{loosened}; a clamp is credited when it changes no gradient by more than {max(MATERIAL, allowance):.0e} "
            "of it")


def leading_finding(rows: dict) -> str:
    """The row that makes every other cause unreliable: a loss depending on the batch's order or size, or a term
    that does not depend on the advantage (it adds to every gradient the audit reads); '' when neither."""
    if rows[BATCH].verdict == "differs":
        return BATCH
    if rows[ZERO_ADVANTAGE].values.get("advantage_free_term"):
        return ZERO_ADVANTAGE
    return ""


def measurements_only(rows: dict, lead: str) -> None:
    """Every difference but ``lead`` is told by its measurement alone: a cause read from it would be a guess."""
    for prop, row in rows.items():
        if prop != lead and row.verdict == "differs":
            row.summary = measurement_line(row)


def measurement_line(row) -> str:
    """The row's difference as numbers, without a cause (a row whose ``measured`` names one keeps a plain
    version in ``values['measurement']``)."""
    plain = row.values.get("measurement") if isinstance(row.values, dict) else None
    return f"{row.property}: {plain or row.measured}"


# Precisions below the audited one that a training run uses: float32, and bfloat16 where the loss accepts it.
TRAINING_PRECISIONS = {"float64": ("float32", "bfloat16"), "float32": ("bfloat16",)}


def _training_precisions(loss_fn, card: ReportCard, device, finding_level) -> dict:
    """The card at each training precision below ``card.dtype``, compared row by row (:func:`compare_precision`)."""
    out = {}
    for name in TRAINING_PRECISIONS.get(card.dtype, ()):
        try:
            narrow = _audit_at(loss_fn, card.name, card.tau_pos, card.tau_neg, name, card.level, device,
                               None, finding_level)
        except AdapterError as exc:
            out[name] = {"audited": False, "reason": str(exc)}
            continue
        out[name] = compare_precision(card, narrow)
    return out


def compare_precision(wide: ReportCard, narrow: ReportCard) -> dict:
    """Where the narrower precision's verdicts disagree with the wider one's.

    A check that differs only at the narrower precision is a difference of the loss (a code path taken only
    there), except a NaN at the extreme ratios past the narrower dtype's exp range (|log r| above ln of its
    largest number), which any loss that does not clamp log r shows and the paper's formula itself shows in that
    dtype: that is said, not counted. Its line names no cause where the wider card names none (a leading finding)
    nor in bfloat16, whose rounding can mimic one; there it states what was measured.
    """
    overflow = _range_overflow(narrow)
    if wide.lead:
        measurements_only({r.property: r for r in narrow.rows}, wide.lead)
    only_here, passes_here = {}, []
    for row in narrow.checks:
        try:
            other = wide.row(row.property)
        except KeyError:
            continue
        if other.verdict == "info":
            continue
        if other.verdict == "pass" and row.verdict != "pass" and not (row.property == EXTREME and overflow):
            only_here[row.property] = measurement_line(row) if narrow.dtype == "bfloat16" else row.line()
        elif other.verdict != "pass" and row.verdict == "pass":
            passes_here.append(row.property)
    return {"audited": True, "verdict": narrow.verdict_line(), "differs_only_here": only_here,
            "passes_only_here": passes_here, "overflow_above": overflow, "exp_range": exp_range(narrow.dtype)}


def exp_range(dtype_name: str) -> float:
    """ln of the dtype's largest number: exp of anything above overflows it."""
    return math.log(torch.finfo(DTYPES[dtype_name]).max)


def _range_overflow(card: ReportCard) -> float | None:
    """The lowest log r above which the loss is not finite, when every finding of the extreme-ratio row is a NaN
    past the card dtype's exp range (from exp(log r) overflowing, or exp(old_logp) underflowing in a quotient of
    probabilities); None otherwise."""
    row = card.row(EXTREME)
    if row.verdict != "differs":
        return None
    limit = exp_range(card.dtype)
    found = [v for sign in ("A > 0", "A < 0") for v in (row.values.get(sign) or {}).values()
             if isinstance(v, dict) and not v.get("harmless")]
    if found and all(v["kind"] == "nonfinite" and v["threshold"] >= limit - 0.05 for v in found):
        return min(v["threshold"] for v in found)
    return None
