"""``audit(loss_fn, ...)``: run every check on one SAPO loss and return its report card."""

from __future__ import annotations

import inspect
import math
import platform

import torch

from .card import ReportCard
from .context import (
    AGGREGATION,
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
from .extreme import clamp_cause, extreme_row
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
    name; tolerances follow it); None audits in float64, or in the narrower precision the loss
    computes in, said in ``card.meta["precision"]``. ``level``: "token" (the paper) or "sequence" when auditing a
    sequence-level variant. ``device``: where the probe tensors live. ``meta``: stored on the
    card as given (framework version, settings). ``finding_level``: "function" when the loss is
    called with the audit's arguments as they are, "training" when an adapter calls it as the
    framework's trainer does. Raises AdapterError when the callable cannot be called that way,
    raises or is not finite on the plainest batch, puts no gradient into ``logp``, or computes
    in a narrower dtype than the one asked for (:mod:`.preflight`); every other failure becomes
    a row with verdict "error".
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
    check_adapter(loss_fn, DTYPES[dtype or "float64"], device)
    dtype_name, precision = preflight(loss_fn, dtype, device)
    dtype = DTYPES[dtype_name]

    ctx = Context(loss_fn, float(tau_pos), float(tau_neg), dtype, device, level)
    rows = {AGGREGATION: aggregation_row(ctx)}  # first: later checks use its weights
    # then the temperatures (a tau held in float32 sets float32's tolerances for what follows)
    rows[GATE_SHAPE], rows[TEMPERATURE_POS], rows[TEMPERATURE_NEG], rows[TEMPERATURE_ZERO] = shape_rows(ctx)
    rows[ON_POLICY], rows[VALUE_AT_ONE] = on_policy_rows(ctx)  # then the measured on-policy factors
    rows[GRADIENT], rows[FINITE_DIFFERENCES], rows[PADDING], rows[OLD_LOGP] = closed_form_rows(ctx)
    rows[LEVEL] = level_row(ctx)
    rows[EXTREME] = extreme_row(ctx)
    clamp = clamp_cause(rows[GATE_SHAPE], rows[EXTREME], float(tau_pos), float(tau_neg), ctx.tol)
    if clamp:  # the shape's cause, now that the extreme ratios located the clamp's thresholds
        rows[GATE_SHAPE].summary = f"gradient shape: {clamp}"
    rows[ZERO_ADVANTAGE] = zero_advantage_row(ctx)
    rows[EMPTY_RESPONSE], rows[EMPTY_BATCH] = empty_rows(ctx)

    from .._version import __version__

    versions = {"sapo_lab": __version__, "torch": torch.__version__, "python": platform.python_version()}
    meta = {**(meta or {}), **({"precision": precision} if precision else {})}
    if ctx.changed_inputs:
        names = ", ".join(n for n in ("logp", "old_logp", "advantages", "mask") if n in ctx.changed_inputs)
        meta["changes_inputs"] = (f"the loss changes its arguments in place ({names}): the audit gave it copies, so "
                                  "its checks stand, but in training it would change the trainer's own tensors")
    return ReportCard(name, float(tau_pos), float(tau_neg), dtype_name, level, [rows[p] for p in ROW_ORDER],
                      versions, meta, finding_level)
