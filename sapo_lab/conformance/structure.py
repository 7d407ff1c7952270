"""Rows about how token losses are combined: aggregation, importance-sampling level, zero and empty inputs."""

from __future__ import annotations

import math

import torch

from .aggregation import FAMILIES, PAPER_AGGREGATION, PROBE_SHAPES, identify
from .card import Row
from .context import AGGREGATION, EMPTY_BATCH, EMPTY_RESPONSE, LEVEL, ZERO_ADVANTAGE, Context, error_row, fmt, verdict
from .probes import make_batch, update_coefficient

LEVEL_LOG_RATIOS = ([-0.5, 0.125, 0.75], [0.5, -0.25])
LEVEL_ADVANTAGES = (1.0, -1.0)
ZERO_LOG_RATIOS = ([0.5, -0.25], [1.0, 0.25, -1.5], [-0.75])
MIXED_ADVANTAGES = (1.0, 0.0, -0.5)  # a nonzero mean, so that re-centring inside the loss shows
# What each other aggregation means for training, in one line (the paper's is the per-response mean).
AGGREGATION_CAUSES = {
    "token_pool": "one mean over the batch's token pool, not per response (long responses weigh more)",
    "padded_length_mean": "each response's sum is divided by the padded length T, not its own length",
    "padded_length_sum": "the batch's token sum is divided by the padded length T",
    "longest_response_mean": "each response's sum is divided by the longest response's length",
    "response_sum_mean": "each response's tokens are summed, not averaged (or divided by a constant)",
    "sum": "a sum over every token, not a mean",
}


def aggregation_row(ctx: Context) -> Row:
    """How tokens are weighted across responses, identified from gradients on responses of different lengths."""
    expected = FAMILIES[PAPER_AGGREGATION][0]
    found = identify(ctx.loss_fn, ctx.dtype, ctx.device, ctx.tol.aggregation)
    shapes = "; ".join(f"lengths {list(ls)} padded to {T}" for ls, T in PROBE_SHAPES)
    if "error" in found:
        ctx.family_note = " (aggregation not identified: the paper's weights are assumed)"
        return error_row(AGGREGATION, expected, found["error"])
    name = found["name"]
    values = {"aggregation": name, "scale": found["scale"], "residuals": found["residuals"],
              "relative_weights": found["weights"]}
    detail = f"on-policy probes, A = 1: {shapes}"
    if name in FAMILIES:
        ctx.family, ctx.family_scale = name, found["scale"]
        measured = FAMILIES[name][0]
        if name != PAPER_AGGREGATION:
            detail += f"; residual of the paper's weights {found['residuals'][PAPER_AGGREGATION]:.3g}"
    else:
        ctx.family_note = " (aggregation not identified: the paper's weights are assumed)"
        best = min(found["residuals"].values(), default=math.nan)
        measured = {"zero": "not identifiable: zero gradient", "non-finite": "not identifiable: non-finite gradient"}.get(
            name, f"other: no known aggregation fits (the nearest is off by {best:.3g})")
        detail += "; measured weight per response, relative to the first: " + str(
            [[fmt(x) for x in w] for w in found["weights"]])
    summary = "" if name == PAPER_AGGREGATION else f"aggregation: {AGGREGATION_CAUSES.get(name, measured)}"
    return Row(AGGREGATION, expected, measured, verdict(name == PAPER_AGGREGATION), detail, values, summary)


def _spread(g: torch.Tensor) -> float:
    top = float(g.abs().max())
    return float(g.max() - g.min()) / top if top > 0 else 0.0


def _token_pattern_error(ctx: Context, batch, m, per_resp) -> float:
    """How far each response's g_t / g_0 is from c(r_t) / c(r_0), the token-level pattern."""
    worst = 0.0
    for i, g in enumerate(per_resp):
        c = update_coefficient(torch.exp(m.log_ratio[i][batch.mask[i]]), ctx.tau(float(batch.adv[i])))
        if float(g[0]) == 0.0:
            return float("inf")
        worst = max(worst, float(((g / g[0]) - c / c[0]).abs().max() / (c / c[0]).abs().max()))
    return worst


def level_row(ctx: Context) -> Row:
    """Token level: each token's gradient follows its own ratio. Sequence level: one gradient per response."""
    expected = {"token": "token-level", "sequence": "sequence-level (geometric-mean ratio)"}[ctx.level]
    batch = make_batch([list(z) for z in LEVEL_LOG_RATIOS], list(LEVEL_ADVANTAGES), 3)
    m = ctx.call(batch)
    if m.error:
        return error_row(LEVEL, expected, m.error)
    if not bool(torch.isfinite(m.grad).all()):
        return Row(LEVEL, expected, "not measurable: non-finite gradient", "differs")
    per_resp = [m.grad[i][batch.mask[i]] for i in range(batch.mask.shape[0])]
    spreads = [_spread(g) for g in per_resp]
    shared_tol = 2 * ctx.tol.grad
    values = {"spreads": spreads}
    if all(float(g.abs().max()) == 0 for g in per_resp):
        measured, kind = "not measurable: zero gradient", "zero"
    elif all(s > shared_tol for s in spreads):
        pattern = _token_pattern_error(ctx, batch, m, per_resp)
        values["token_pattern_rel_error"] = pattern
        if pattern <= 10 * ctx.tol.grad or not ctx.shape_ok:  # a wrong gate already fails its own row
            measured, kind = "token-level: each token's gradient follows its own ratio", "token"
        else:
            measured, kind = (f"per-token gradients that do not follow each token's own ratio (rel. error {pattern:.3g})",
                              "other")
    elif all(s <= shared_tol for s in spreads):
        z = m.log_ratio
        mask = batch.mask.double()
        seq_z = (z * mask).sum(-1) / mask.sum(-1)
        taus = torch.tensor([ctx.tau(a) for a in batch.adv.tolist()], dtype=torch.float64)
        alpha = ctx.weights(batch.mask)
        pred = -batch.adv * ctx.k(batch.adv) * update_coefficient(torch.exp(seq_z), taus)
        shared = torch.stack([g[0] for g in per_resp])
        first_alpha = torch.stack([alpha[i][batch.mask[i]][0] for i in range(len(per_resp))])
        err = float(((shared - pred * first_alpha).abs() / (pred * first_alpha).abs()).max())
        values["geometric_mean_rel_error"] = err
        if err <= 10 * ctx.tol.grad:
            measured, kind = "sequence-level: one gradient per response, from its geometric-mean ratio", "sequence"
        else:
            measured, kind = (f"sequence-level, but not from the geometric-mean ratio (rel. error {err:.3g})",
                              "sequence_other")
    else:
        measured, kind = f"mixed: shared within some responses only (spreads {[fmt(s) for s in spreads]})", "other"
    values["level"] = kind
    if kind in ("sequence", "sequence_other") or measured.startswith("mixed"):  # a reading of the spreads
        values["measurement"] = ("the token gradients of each response spread by "
                                 + ", ".join(fmt(x) for x in spreads)
                                 + f" of their largest (tokens share one gradient within {shared_tol:.2g})")
    summary = "" if kind == ctx.level else f"importance-sampling level: {measured} ({expected} expected)"
    return Row(LEVEL, expected, measured, verdict(kind == ctx.level),
               "responses of 3 and 2 tokens with different token ratios; tokens of a response share their gradient "
               "only at sequence level", values, summary)


def zero_advantage_row(ctx: Context) -> Row:
    """Equal-reward groups and A = 0 tokens: a finite loss and a gradient exactly 0 on those tokens."""
    expected = "finite loss, gradient exactly 0 where A = 0"
    zs = [list(z) for z in ZERO_LOG_RATIOS]
    group = ctx.call(make_batch(zs, [0.0, 0.0, 0.0], 3))
    mixed = ctx.call(make_batch(zs, list(MIXED_ADVANTAGES), 3))
    for m in (group, mixed):
        if m.error:
            return error_row(ZERO_ADVANTAGE, expected, m.error)
    problems = []
    if not math.isfinite(group.value):
        problems.append(f"equal-reward group: loss {group.value}")
    g_all = float(group.grad.abs().max())
    if not g_all == 0:
        problems.append(f"equal-reward group: max |gradient| {g_all:.3g}")
    g_mixed = float(mixed.grad[1].abs().max())
    if not g_mixed == 0:
        problems.append(f"A = 0 response among A = 1, -0.5: max |gradient| {g_mixed:.3g}")
    if not bool(torch.isfinite(mixed.grad).all()):
        problems.append("mixed batch: non-finite gradient")
    measured = "; ".join(problems) if problems else f"loss {fmt(group.value)}, gradient 0 (all-zero group and mixed batch)"
    values = {"group_loss": group.value, "group_max_abs_grad": g_all, "mixed_zero_response_max_abs_grad": g_mixed}
    summary = ""
    if problems:
        summary = ("A = 0 tokens get a gradient or a non-finite loss "
                   f"({problems[0]}): advantages shifted or re-normalised inside the loss")
        shift = _advantage_shift(ctx, zs, group)
        if g_all > 0 and math.isfinite(g_all) and shift is None:
            values["advantage_free_term"] = True
            summary = (f"a term that does not depend on the advantage (a KL penalty or an entropy bonus, say): with "
                       f"every A = 0 the loss is {fmt(group.value)} and its gradient up to {g_all:.3g}, where the "
                       "paper's is 0; it adds to every gradient below, so no cause is named there")
        elif shift is not None:
            values["advantage_shift"] = shift
    return Row(ZERO_ADVANTAGE, expected, measured, verdict(not problems),
               "a group whose rewards are all equal has A = 0 for every response", values, summary)


def _advantage_shift(ctx: Context, log_ratios, group) -> float | None:
    """s when the gradient with every A = 0 is SAPO's for A = s (tau_pos or tau_neg), the advantage shifted inside
    the loss; None when it is not SAPO's for any advantage (a term that does not depend on it) or is 0."""
    batch = make_batch(log_ratios, [0.0] * len(log_ratios), 3)
    g = group.grad[batch.mask]
    if not bool(torch.isfinite(g).all()) or float(g.abs().max()) == 0:
        return None
    alpha = ctx.weights(batch.mask)[batch.mask]
    for tau in (ctx.tau_neg, ctx.tau_pos):
        shape = alpha * update_coefficient(torch.exp(group.log_ratio[batch.mask]), tau)
        s = -float((g * shape).sum() / (shape * shape).sum())
        if float((g + s * shape).abs().max()) <= 10 * ctx.tol.grad * float(g.abs().max()):
            return s
    return None


def empty_rows(ctx: Context) -> tuple[Row, Row]:
    """Two rows: a response with no tokens, and a batch with no tokens at all."""
    return _empty_response_row(ctx), _empty_batch_row(ctx)


def _empty_response_row(ctx: Context) -> Row:
    expected = "finite; the empty response gets no gradient and is left out of the mean (review §3)"
    batch = make_batch([[0.0, 0.0], [], [0.0, 0.0, 0.0]], [1.0, -1.0, 0.5], 3)
    m = ctx.call(batch)
    if m.error:
        return error_row(EMPTY_RESPONSE, expected, m.error)
    value_finite, grad_finite = math.isfinite(m.value), bool(torch.isfinite(m.grad).all())
    if not value_finite or not grad_finite:
        what = (f"loss {m.value}" + ("" if grad_finite else " and a non-finite gradient") if not value_finite
                else f"a finite loss ({fmt(m.value)}) but a non-finite gradient")
        return Row(EMPTY_RESPONSE, expected, f"{what}", "differs",
                   "an empty response divides 0 by 0; count each response's tokens with .clamp(min=1), or leave "
                   "empty responses out of the mean",
                   summary=f"a batch with an empty response gives {what}: its length 0 divides 0 by 0")
    if float(m.grad[1].abs().max()) != 0:
        return Row(EMPTY_RESPONSE, expected, "the empty response's padding gets a gradient", "differs",
                   summary="an empty response's padding gets a gradient")
    base = -batch.adv[:, None] * ctx.k(batch.adv)[:, None]
    if not float(ctx.k(batch.adv).abs().max()) > 0:  # nothing to predict the other responses' gradients from
        return Row(EMPTY_RESPONSE, expected, "finite; the others' weights not measurable: the on-policy gradient "
                   f"measured 0 (factor {fmt(ctx.k_pos)} for A > 0, {fmt(ctx.k_neg)} for A < 0)", "differs",
                   summary="empty response in a batch: finite, but the other responses' weights are not measurable "
                           "(the on-policy gradient measured 0)")
    fits = {}
    for label, count in (("left out of the mean", False), ("counted in the mean", True)):
        pred = base * ctx.weights(batch.mask, count_empty=count)
        scale = float(pred.abs().max())
        fits[label] = float((m.grad - pred).abs().max()) / scale
    best = min(fits, key=fits.get)
    same = abs(fits["left out of the mean"] - fits["counted in the mean"]) <= ctx.tol.grad
    if fits[best] > 10 * ctx.tol.grad:
        return Row(EMPTY_RESPONSE, expected, "finite, but the other responses' gradients match neither weighting "
                   f"(rel. errors {', '.join(f'{k}: {v:.3g}' for k, v in fits.items())})", "differs", values=fits,
                   summary="an empty response changes the others' gradients in no known way")
    if same:
        measured = "finite; the empty response does not change the other weights under this aggregation"
    elif best == "counted in the mean":
        measured = "finite; the empty response is counted in the mean (the others' weights shrink by 2/3)"
    else:
        measured = "finite; the empty response is left out of the mean"
    return Row(EMPTY_RESPONSE, expected, measured, "pass",
               "lengths 2, 0, 3 on-policy; counting the empty response is a scale change, not a failure",
               {"counted": best == "counted in the mean" and not same, **fits})


def _empty_batch_row(ctx: Context) -> Row:
    expected = "a finite loss with zero gradient, or a clear error"
    m = ctx.call(make_batch([[], []], [1.0, -1.0], 2))
    if m.error:
        return Row(EMPTY_BATCH, expected, f"raises {m.error}", "pass", values={"raises": m.error})
    value_finite, grad_finite = math.isfinite(m.value), bool(torch.isfinite(m.grad).all())
    zero = value_finite and grad_finite and float(m.grad.abs().max()) == 0
    if zero:
        measured, cause = f"returns {fmt(m.value)} with zero gradient", ""
    elif not value_finite:
        measured = f"returns {m.value}" + ("" if grad_finite else " with a non-finite gradient")
        cause = "a silent NaN: its token count 0 divides 0 by 0"
    elif not grad_finite:
        measured = f"returns {fmt(m.value)} but a non-finite gradient"
        cause = "a silent NaN in the update: its token count 0 divides 0 by 0"
    else:
        measured = f"returns {fmt(m.value)} with a nonzero gradient, max {float(m.grad.abs().max()):.3g}"
        cause = "padding is trained: the mask is not applied"
    return Row(EMPTY_BATCH, expected, measured, verdict(zero), cause, {"value": m.value},
               "" if zero else f"a batch without tokens {measured} ({cause})")
