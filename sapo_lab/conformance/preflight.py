"""Before the checks: can the loss be audited at all, and in which precision does it compute?

A loss must be finite on the plainest batch and put a gradient into ``logp``: without either, every
check would read a NaN or a zero and name causes that are not there. A loss that rounds its float64
inputs to float32 (or to 16 bits) inside is audited at that precision, where its rounding is no
difference; asked for a wider dtype explicitly, the audit says which one to use instead.
"""

from __future__ import annotations

import math

import torch

from .probes import DTYPES, Batch, make_batch


class AdapterError(ValueError):
    """The callable cannot be audited at all: wrong signature, no scalar, raises or is not finite on the plainest
    batch, no gradient in ``logp``, or it computes in a narrower dtype than the one asked for."""


PLAIN_LOG_RATIOS, PLAIN_ADVANTAGES = ([[0.25, -0.5], [0.5]], [1.0, -1.0])  # the batch check_adapter calls first
PLAIN_WHERE = "on the plainest batch (log r 0.25, -0.5 and 0.5, A = +1 and -1)"
# Ratios within 3 % of 1, inside any clamp a SAPO loss would carry, so that every token has a gradient to watch.
NEAR_ONE_LOG_RATIOS = [[2.0**-6, -(2.0**-6)], [2.0**-5]]
# A relative change of every log-prob that the dtype rounds away and every wider one keeps: a loss whose value
# and gradient do not move under it computes in that dtype (or a narrower one), whatever dtype it returns.
BELOW_RESOLUTION = {"float32": 2.0**-27, "float16": 2.0**-14, "bfloat16": 2.0**-10}
NARROWER = {"float64": ("float32", "float16", "bfloat16"), "float32": ("float16", "bfloat16")}


def _probe(loss_fn, batch: Batch, dtype, device=None):
    """(value, gradient in logp, whether the value is attached to logp's graph), or None if the loss raised."""
    logp = batch.logp.to(device=device, dtype=dtype, copy=True).requires_grad_(True)
    try:  # copies: a loss that changes its arguments in place must not change the audit's batches
        out = loss_fn(logp, batch.old.to(device=device, dtype=dtype, copy=True),
                      batch.adv.to(device=device, dtype=dtype, copy=True), batch.mask.to(device=device, copy=True))
        value = out.detach().double().cpu().reshape(())
        attached = out.requires_grad
        grad = torch.autograd.grad(out.reshape(()), logp, allow_unused=True)[0] if attached else None
    except Exception:  # the audit's own rows report what raises; this probe only looks for the plainest facts
        return None
    grad = torch.zeros_like(batch.logp) if grad is None else grad.detach().double().cpu()
    return value, grad, attached


def _scaled(batch: Batch, factor: float) -> Batch:
    return Batch(batch.logp * factor, batch.old * factor, batch.adv, batch.mask)


def _same(a, b) -> bool:
    return torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _check_auditable(loss_fn, dtype, device) -> None:
    """AdapterError when the loss is not finite, or has no gradient in logp, on the plainest batch or at r = 1."""
    plain = make_batch(PLAIN_LOG_RATIOS, PLAIN_ADVANTAGES, 2)
    on_policy = make_batch([[0.0] * len(z) for z in PLAIN_LOG_RATIOS], PLAIN_ADVANTAGES, 2)
    first, at_one = _probe(loss_fn, plain, dtype, device), _probe(loss_fn, on_policy, dtype, device)
    for probe, batch in ((first, plain), (at_one, on_policy)):
        if probe is None:
            continue
        value, grad, _ = probe
        tokens = grad[batch.mask]
        if not math.isfinite(float(value)) or not bool(torch.isfinite(tokens).all()):
            bad = int((~torch.isfinite(tokens)).sum())
            raise AdapterError(
                f"the loss is not finite {PLAIN_WHERE if batch is plain else 'at r = 1'}: value {float(value)}, "
                f"{bad} of {tokens.numel()} token gradients non-finite; nothing can be audited until it is")
    if at_one is not None and float(at_one[1].abs().max()) == 0.0:
        if not at_one[2]:
            raise AdapterError(
                "no gradient reaches logp: the loss is not attached to logp's graph (computed under torch.no_grad(), "
                "or from logp.detach()), so training would not move the policy")
        if first is not None and float(first[1].abs().max()) == 0.0:
            raise AdapterError(
                "the gradient in logp is exactly 0 (SAPO's is -A r w(r) / L): logp cancels out of the loss, e.g. "
                "old_logp taken from logp without detach, so that r = exp(logp - logp) = 1 carries no gradient")
        raise AdapterError(
            "the gradient in logp is exactly 0 at r = 1, where SAPO's is -A / L for every tau: the audit measures "
            "every property against that on-policy gradient and cannot proceed")


def computes_in(loss_fn, asked: str, device=None) -> str | None:
    """The narrowest dtype below ``asked`` whose rounding the loss's value and gradient show, or None."""
    if not NARROWER.get(asked):
        return None
    dtype = DTYPES[asked]
    near = make_batch(NEAR_ONE_LOG_RATIOS, PLAIN_ADVANTAGES, 2)
    reference = _probe(loss_fn, near, dtype, device)
    if reference is None or not bool((reference[1][near.mask] != 0).all()):  # a gradient held at 0 by a clamp
        return None
    doubled = make_batch([[2 * z for z in zs] for zs in NEAR_ONE_LOG_RATIOS], PLAIN_ADVANTAGES, 2)
    control = _probe(loss_fn, doubled, dtype, device)  # log ratios doubled: a change every dtype keeps
    if control is None or _same(control, reference):
        return None  # the outputs do not follow the inputs at all (r held at 1): no evidence either way
    narrower = None
    for name in NARROWER[asked]:
        moved = _probe(loss_fn, _scaled(near, 1.0 + BELOW_RESOLUTION[name]), dtype, device)
        if moved is None or not _same(moved, reference):
            break
        narrower = name
    return narrower


def preflight(loss_fn, dtype_name: str | None = None, device=None) -> tuple[str, str]:
    """The dtype to audit at and a note on it ('' when none), or AdapterError when the loss cannot be audited.

    ``dtype_name`` None means float64, or the narrower precision the loss computes in; a dtype asked for
    explicitly that is wider than the loss's own raises AdapterError naming the one to use.
    """
    asked = dtype_name or "float64"
    if asked not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype_name!r}")
    _check_auditable(loss_fn, DTYPES[asked], device)
    narrower = computes_in(loss_fn, asked, device)
    if narrower is None:
        return asked, ""
    evidence = (f"its value and gradient do not move when every {asked} log-prob changes by a relative "
                f"{BELOW_RESOLUTION[narrower]:.2g}, which {narrower} rounds away")
    if dtype_name is not None:
        raise AdapterError(
            f"the loss computes in {narrower} ({evidence}): a {asked} audit would report {narrower} rounding as "
            f"differences; rerun with --dtype {narrower} (dtype={narrower!r} in audit())")
    return narrower, (f"the loss computes in {narrower} ({evidence}): audited in {narrower} (--dtype {narrower}), "
                      f"where its rounding is no difference")
