"""Before any reading: is the loss a function of its batch alone, whatever the batch's order and size?

Every other check compares numbers from different calls. A loss that answers the same batch differently on two
calls (random, or keeping state across calls) makes those comparisons meaningless: it cannot be audited. A loss
whose answer depends on the order of the responses, or on which other responses share the batch, is not the
paper's under any mean aggregation: that is one difference, said first, and the rest of the card then states
measurements without naming causes.

What the batch row checks, on four responses of 3, 1, 4 and 2 tokens with A = 1.5, -0.5, 0.5, -1:

* order: the responses reversed (rows of log-probs, advantages and mask together) give the same value and the
  same per-token gradients, reversed;
* size: each half of the batch (responses 1-2 and 3-4, same padded length) called alone gives, on its tokens, the
  full batch's gradient up to one positive factor (the half's share of the mean: N_h / N for a per-response mean,
  its token share for a token pool, 1 for a sum), and the full value is the halves' values weighted by those
  factors.

Both hold for every aggregation the audit knows; each is judged within the audit's allowance. A reversed batch that
differs only after the original order was seen (the same reversed responses at a new padded length agree) is state,
not order, and the loss cannot be audited; so is a loss whose first batch, asked again after every check, is
answered differently.
"""

from __future__ import annotations

import math

import torch

from .card import Row
from .context import BATCH, Context, error_row, verdict
from .preflight import AdapterError
from .probes import Batch, make_batch

# Ratios within 0.89 and 1.14, inside the clamps SAPO losses carry (a ratio clamp at 0.8 and 1.2 keeps every token's
# gradient), off 1 enough for the temperature to show; dyadic, so exact in 16 bits.
CONSISTENCY_LOG_RATIOS = ([-0.125, 0.0625, 0.09375], [0.125], [-0.09375, -0.0625, 0.046875, 0.03125],
                          [0.078125, -0.109375])
CONSISTENCY_ADVANTAGES = (1.5, -0.5, 0.5, -1.0)  # the first response's sign is not the reversed batch's
HALVES = ((0, 1), (2, 3))
EXPECTED = ("the same value and the same per-token gradients for the responses reversed; each half of the batch "
            "alone: the full batch's gradient on its tokens up to one positive factor, and the full value the "
            "halves' values weighted by those factors")


def consistency_batch() -> Batch:
    """The batch of the pre-checks (determinism, order, size): its log ratios and advantages, as a ``Batch``."""
    return make_batch([list(z) for z in CONSISTENCY_LOG_RATIOS], list(CONSISTENCY_ADVANTAGES))


def rows_of(batch: Batch, index) -> Batch:
    """The responses ``index`` of ``batch``, in that order, with the batch's padded length."""
    index = torch.as_tensor(list(index))
    return Batch(batch.logp[index], batch.old[index], batch.adv[index], batch.mask[index])


def _scale(m) -> float:
    """The size the differences are measured against: the largest token gradient (1 where there is none)."""
    top = float(m.grad.abs().max())
    return top if top > 0 else 1.0


def _gaps(first, second) -> tuple[float, float]:
    """How far two answers to the same batch are apart: (value gap, largest gradient gap), relative to the first."""
    scale = _scale(first)
    value_gap = abs(first.value - second.value) / max(abs(first.value), scale)
    return value_gap, float((first.grad - second.grad).abs().max()) / scale


def check_deterministic(ctx: Context):
    """AdapterError when two calls on the same batch disagree beyond the allowance (random, or state kept across
    calls): no reading of the audit's probes would be reproducible. Returns the first answer (None when the loss
    raised or is not finite here), for :func:`check_still_deterministic` to compare with at the end."""
    batch = consistency_batch()
    first, second = ctx.call(batch), ctx.call(batch)
    if first.error or second.error or not math.isfinite(first.value):
        return None  # the rows report a loss that raises or is not finite here
    value_gap, grad_gap = _gaps(first, second)
    allowance = ctx.tol.grad
    if not (value_gap <= allowance and grad_gap <= allowance):  # a nan gap is a difference too
        raise AdapterError(
            f"the loss is not deterministic: two calls on the same batch gave values {first.value:.6g} and "
            f"{second.value:.6g} and gradients apart by {grad_gap:.3g} of the largest (allowance {allowance:.0e}): "
            "it draws random numbers or keeps state across calls, so no check can be read; nothing was audited")
    return first


def check_still_deterministic(ctx: Context, first) -> None:
    """AdapterError when the batch of :func:`check_deterministic`, called again after every check, is answered
    differently: state that changes after some calls (a schedule, a counter) makes every reading in between a
    mixture of two losses, which two back-to-back calls at the start cannot see."""
    if first is None:
        return
    last = ctx.call(consistency_batch())
    if last.error:
        raise AdapterError(f"not deterministic across the audit: the batch it answered first raised {last.error} "
                           "when called again after every check; nothing was audited")
    value_gap, grad_gap = _gaps(first, last)
    allowance = ctx.tol.grad
    if not (value_gap <= allowance and grad_gap <= allowance):
        raise AdapterError(
            f"not deterministic across the audit: the batch it answered first, called again after every check, gave "
            f"value {last.value:.6g} instead of {first.value:.6g} and gradients apart by {grad_gap:.3g} of the "
            f"largest (allowance {allowance:.0e}): the loss keeps state that changes across calls (a counter, a "
            "schedule, a running statistic), so its checks read different losses; nothing was audited")


def _proportional(full: torch.Tensor, part: torch.Tensor) -> tuple[float, float]:
    """The factor c with full = c * part (least squares) and the largest residual, relative to max |full|; c is nan
    when both are 0 (nothing to compare: a clamp holds every token of the half)."""
    denominator = float((part * part).sum())
    if denominator == 0:
        return math.nan, (0.0 if float(full.abs().max()) == 0 else math.inf)
    c = float((full * part).sum()) / denominator
    top = float(full.abs().max()) or 1.0
    return c, float((full - c * part).abs().max()) / top


def padded(batch: Batch) -> Batch:
    """``batch`` with one more padding position: the same responses at a padded length the audit has not used."""
    def column(x, fill):
        return torch.cat([x, torch.full_like(x[:, :1], fill)], dim=1)
    return Batch(column(batch.logp, 0.0), column(batch.old, 0.0), batch.adv, column(batch.mask, False))


def _order_or_state(ctx: Context, batch: Batch, order: list, full) -> None:
    """AdapterError when the reversed batch's difference is state, not order: the same reversed responses, called
    first at a padded length not seen before, get the full batch's gradients reversed (a value cached by batch
    shape, say, computed for the original order and reused for the reversed one)."""
    fresh = ctx.call(padded(rows_of(batch, order)))
    if fresh.error or not math.isfinite(fresh.value):
        return
    scale = _scale(full)
    value_gap = abs(fresh.value - full.value) / max(abs(full.value), scale)
    grad_gap = float((fresh.grad[:, :-1] - full.grad[order]).abs().max()) / scale
    allowance = ctx.tol.grad
    if value_gap <= allowance and grad_gap <= allowance:
        raise AdapterError(
            "not deterministic across calls: the responses reversed get other gradients right after the original "
            "order, but the full batch's gradients reversed when called first at a new padded length: the loss "
            "keeps state from earlier calls (a value cached by batch shape, say), not an order dependence; "
            "nothing was audited")


def batch_row(ctx: Context) -> Row:
    """The order and size check (module docstring)."""
    batch = consistency_batch()
    full = ctx.call(batch)
    if full.error:
        return error_row(BATCH, EXPECTED, full.error)
    order = list(range(batch.adv.numel()))[::-1]
    reversed_ = ctx.call(rows_of(batch, order))
    halves = [ctx.call(rows_of(batch, h)) for h in HALVES]
    for m in (reversed_, *halves):
        if m.error:
            return error_row(BATCH, EXPECTED, m.error)
    allowance = ctx.tol.grad
    scale = _scale(full)
    value_scale = max(abs(full.value), scale)
    problems, values = [], {}

    order_value = abs(reversed_.value - full.value) / value_scale
    order_grad = float((reversed_.grad - full.grad[order]).abs().max()) / scale
    values["order"] = {"value_gap": order_value, "gradient_gap": order_grad}
    if not (order_value <= allowance and order_grad <= allowance):
        _order_or_state(ctx, batch, order, full)
        problems.append(f"the responses reversed change the value by {order_value:.3g} and the gradients by up to "
                        f"{order_grad:.3g} of the largest")

    factors, residuals = [], []
    for rows, m in zip(HALVES, halves, strict=True):
        mask = batch.mask[list(rows)]
        c, residual = _proportional(full.grad[list(rows)][mask], m.grad[mask])
        factors.append(c)
        residuals.append(residual)
    combined = sum(c * m.value for c, m in zip(factors, halves, strict=True))
    # the value is weighed only with both factors known
    size_value = abs(combined - full.value) / value_scale if all(map(math.isfinite, factors)) else 0.0
    values["size"] = {"factors": factors, "residuals": residuals, "value_gap": size_value}
    worst = max(residuals)
    if not (worst <= allowance and all(c > 0 or math.isnan(c) for c in factors)):
        problems.append(f"a half of the batch alone gets a gradient that is not the full batch's up to one factor "
                        f"(off by up to {worst:.3g} of the largest)")
    elif not size_value <= allowance:
        problems.append(f"the full value is not the halves' values weighted by their shares (off by {size_value:.3g})")

    ok = not problems
    measured = ("the same under reversal; each half a share of the full batch" if ok else "; ".join(problems))
    summary = "" if ok else ("the loss depends on the batch's " + ("order" if order_value > allowance or
                                                                   order_grad > allowance else "size")
                             + f": {measured}; no cause is named below, where every row is a measurement")
    return Row(BATCH, EXPECTED, measured, verdict(ok),
               "responses of 3, 1, 4 and 2 tokens, A = 1.5, -0.5, 0.5, -1; reversed, and split into two halves of "
               f"two (allowance {allowance:.0e} of the largest gradient)", values, summary)
