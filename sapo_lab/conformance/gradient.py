"""Rows about the per-token gradient: closed form, finite differences, r = 1, gate shape, temperatures."""

from __future__ import annotations

import math

import torch

from .aggregation import FAMILIES
from .card import Row
from .context import (
    FINITE_DIFFERENCES,
    GATE_SHAPE,
    GRADIENT,
    OLD_LOGP,
    ON_POLICY,
    PADDING,
    TEMPERATURE_NEG,
    TEMPERATURE_POS,
    TEMPERATURE_ZERO,
    VALUE_AT_ONE,
    Context,
    error_row,
    fmt,
    verdict,
)
from .probes import (
    Batch,
    expected_gradient,
    finite_differences,
    make_batch,
    relative_error,
    single_tokens,
    update_coefficient,
)

# Moderate log ratios for the gate's shape; the temperature is fitted only where |r - 1| >= 0.4,
# because near r = 1 the gate is 1 - tau^2 (r-1)^2 / 4 and says little about tau.
SHAPE_LOG_RATIOS = (0.0, -1.5, -0.75, -0.25, 0.25, 0.5, 1.0)
FIT_MIN_DISTANCE = 0.4
# On-policy advantages: both signs, two magnitudes each, and a net sum that is not 0 even when
# tau_pos = tau_neg (so that an uncentred value cannot cancel to 0).
ON_POLICY_ADVANTAGES = (0.5, 2.0, -0.5, -1.0)
# The closed-form probe: unequal lengths, both signs, tokens on both sides of r = 1, padding.
CLOSED_FORM_LOG_RATIOS = ([-0.5, 0.25, 1.0], [0.75], [-1.5, -0.25, 0.5, 0.125], [0.375, -0.75])
CLOSED_FORM_ADVANTAGES = (1.5, -0.5, 0.5, -1.0)


def _weights_note(ctx: Context) -> str:
    return f"aggregation weights alpha: {FAMILIES[ctx.family][0]}{ctx.family_note}"


def on_policy_rows(ctx: Context) -> tuple[Row, Row]:
    """At r = 1, d loss / d log p = -A alpha for every tau: the factor the loss applies there, and its value."""
    expected = "factor 1 for A > 0 and A < 0 (gradient -A * alpha)"
    batch = make_batch([[0.0]] * len(ON_POLICY_ADVANTAGES), list(ON_POLICY_ADVANTAGES))
    m = ctx.call(batch)
    value_expected = "0 if centred, -sum alpha A 2/tau if not (both valid)"
    if m.error:
        return error_row(ON_POLICY, expected, m.error), error_row(VALUE_AT_ONE, value_expected, m.error)
    alpha = ctx.weights(batch.mask)[:, 0]
    adv = batch.adv
    factors = (m.grad[:, 0] / (-adv * alpha)).tolist()
    pos = [f for f, a in zip(factors, adv.tolist(), strict=True) if a > 0]
    neg = [f for f, a in zip(factors, adv.tolist(), strict=True) if a < 0]
    ctx.k_pos, ctx.k_neg = sum(pos) / len(pos), sum(neg) / len(neg)
    tol = ctx.tol.grad
    ok = all(math.isfinite(f) and abs(f - 1.0) <= tol for f in factors)
    ctx.on_policy_ok = ok
    measured = f"factor {fmt(ctx.k_pos)} (A > 0), {fmt(ctx.k_neg)} (A < 0)"
    notes = []
    for label, fs in (("A > 0", pos), ("A < 0", neg)):
        if max(fs) - min(fs) > tol * max(1.0, max(abs(f) for f in fs)):
            notes.append(f"the factor depends on |A| for {label}: {[fmt(f) for f in fs]} at |A| = "
                         f"{[abs(a) for a in adv.tolist() if (a > 0) == (label == 'A > 0')]}")

    def near(x, y):  # naming a cause is a hint: loose enough for a temperature held in float32
        return abs(x - y) <= max(tol, 1e-6) * max(1.0, abs(y))

    cause, against = "", ""
    value_not_slope = near(ctx.k_pos, 2 / ctx.tau_pos) and near(ctx.k_neg, 2 / ctx.tau_neg)
    if not ok and value_not_slope and ctx.shape_cause.startswith("g(r) is f(r)"):
        cause = "2/tau = f(1), the surrogate's value, not its slope"  # the shape row reads f(r) too
    elif not ok:
        against = _factor_disagreement(ctx, near)
    if against:
        notes.append(against)
    if not ok and not against and not cause:
        if near(ctx.k_pos, ctx.tau_pos / 4) and near(ctx.k_neg, ctx.tau_neg / 4):
            cause = "the 4/tau factor is missing"
            notes.append(f"equals tau/4 ({fmt(ctx.tau_pos / 4)}, {fmt(ctx.tau_neg / 4)}): the effective learning rate "
                         "shrinks by tau/4 and differs between the signs")
        elif near(ctx.k_pos, 0.25) and near(ctx.k_neg, 0.25):
            cause = "a factor 4 is missing (or the loss is / 4)"
        elif near(ctx.k_pos, 0.5) and near(ctx.k_neg, 0.5):
            cause = "a 2/tau prefactor where the paper has 4/tau (or the loss halved)"
        elif near(ctx.k_pos, -1.0) and near(ctx.k_neg, -1.0):
            cause = "the advantage's sign is flipped (an objective returned where a loss is expected)"
        elif near(ctx.k_pos, 1.0) and near(ctx.k_neg, -1.0):
            cause = "A < 0 gives -1: the loss uses |A|"
        elif near(ctx.k_pos, ctx.k_neg):
            cause = "one constant scale for both signs (a normaliser, or a learning-rate change)"
        # a constant factor scales the value with the gradient: the value-vs-gradient check must agree
        ctx.constant_factor_summary = (f"on-policy gradient factor {_factor_text(ctx)} instead of 1 "
                                       "(the value's derivative differs from the applied gradient too, which no "
                                       "constant factor does)") if cause else ""
        notes.append(f"ratio of the factors A<0 / A>0: {fmt(ctx.k_neg / ctx.k_pos) if ctx.k_pos else 'undefined'}")
        if cause:
            notes.insert(0, cause)
    summary = "" if ok else (f"on-policy gradient factor {_factor_text(ctx)} instead of 1"
                             + (f": {cause}" if cause else f" ({against})" if against else ""))
    on_policy = Row(ON_POLICY, expected, measured, verdict(ok), "; ".join([*notes, _weights_note(ctx)]),
                    {"factor_pos": ctx.k_pos, "factor_neg": ctx.k_neg, "factors": factors, "advantages": adv.tolist()},
                    summary)
    return on_policy, _value_row(ctx, m.value, batch, alpha, torch.tensor(factors, dtype=torch.float64))


def _factor_text(ctx: Context) -> str:
    """The two factors with as many digits as it takes to see them differ from 1 (a 1e-6 shift reads 1.000001)."""
    digits = max([4] + [math.ceil(-math.log10(abs(k - 1.0))) + 1 for k in (ctx.k_pos, ctx.k_neg)
                        if math.isfinite(k) and 0 < abs(k - 1.0) < 1e-3])
    return f"{ctx.k_pos:.{digits}g} / {ctx.k_neg:.{digits}g}"


def _factor_disagreement(ctx: Context, near) -> str:
    """What on the rest of the card contradicts reading the on-policy factors as one constant in the loss; ''.

    A constant factor (a missing 4/tau, a 2/tau prefactor, a flipped sign) scales every gradient alike: the gate's
    shape across r stays the paper's, and the aggregation probes (every A = 1) measure the A > 0 factor again."""
    if not ctx.shape_ok:
        return "the gradient's shape across r differs too, which no constant factor does"
    if not math.isfinite(ctx.family_scale):
        return "the aggregation is not identified, so the factor is not confirmed on other batches"
    if not near(ctx.family_scale, ctx.k_pos):
        return (f"the aggregation probes, where every A = 1, measured {ctx.family_scale:.4g}: the factor depends on "
                "the batch")
    return ""


def _value_row(ctx: Context, value: float, batch, alpha, factors) -> Row:
    """A centred loss is 0 at r = 1; an uncentred one is -sum alpha A f(1), where a scaled sigmoid has f(1) = 2 k / tau."""
    taus = torch.tensor([ctx.tau(a) for a in batch.adv.tolist()], dtype=torch.float64)
    scale = float((alpha * batch.adv.abs() * 2.0 / taus).sum())
    uncentred = float(-(alpha * batch.adv * factors * 2.0 / taus).sum())
    f1 = (2 * ctx.k_pos / ctx.tau_pos, 2 * ctx.k_neg / ctx.tau_neg)
    paper = (2 / ctx.tau_pos, 2 / ctx.tau_neg)
    tol = max(ctx.tol.grad, 1e-12)
    expected = f"either: centred (0) or uncentred (-sum alpha A f(1), paper f(1) = 2/tau = {fmt(paper[0])}, " \
               f"{fmt(paper[1])})"
    if not math.isfinite(value):
        return Row(VALUE_AT_ONE, expected, f"non-finite value {value}", "differs",
                   summary=f"value at r = 1 is {value}")
    if abs(value) <= tol * scale:
        measured, kind = "centred: 0", "centred"
    elif abs(value - uncentred) <= tol * scale:
        same = all(abs(a - b) <= tol * b for a, b in zip(f1, paper, strict=True))
        measured = (f"uncentred: {fmt(value)} = -sum alpha A f(1) with f(1) = {fmt(f1[0])} (A > 0), {fmt(f1[1])} "
                    f"(A < 0)" + (", the paper's 2/tau" if same else ", not the paper's 2/tau"))
        kind = "uncentred"
    else:
        measured, kind = f"offset {fmt(value)} (neither 0 nor -sum alpha A f(1) = {fmt(uncentred)})", "offset"
    return Row(VALUE_AT_ONE, expected, measured, "info",
               "a constant offset does not change the gradient; the uncentred form's value depends on tau",
               {"value": value, "uncentred_prediction": uncentred, "kind": kind, "f1": list(f1)})


def _fit_tau(ratio: float, w: float) -> float:
    """Solve sech^2(tau (r - 1) / 2) = w for tau > 0 (nan when no tau gives w)."""
    if not (0.0 < w < 1.0) or ratio == 1.0:
        return math.nan
    return 2.0 * math.acosh(1.0 / math.sqrt(w)) / abs(ratio - 1.0)


def _combine_fits(points: list) -> tuple[float, bool, float]:
    """One tau from per-ratio fits (r, tau_r, relative error of that ratio's gradient).

    Returns (tau, whether every fit agrees with it, its relative bound). A fit at u = tau |r - 1|
    pins tau down to err / s with s = u tanh(u / 2) (how fast ln w moves with ln tau); fits are
    weighted by 1 / bound^2 and must agree within their bounds.
    """
    if not points or not all(math.isfinite(t) and t > 0 for _, t, _ in points):
        return math.nan, False, math.inf
    bounds = []
    for r, t, err in points:
        u = t * abs(r - 1)
        bounds.append(err / (u * math.tanh(u / 2)))
    weights = [1 / b**2 for b in bounds]
    tau = sum(w * t for w, (_, t, _) in zip(weights, points, strict=True)) / sum(weights)
    best = min(bounds)
    agree = all(abs(t - tau) <= (b + best) * tau for (_, t, _), b in zip(points, bounds, strict=True))
    return (tau if agree else math.nan), agree, best


def _fit_points(ctx: Context, r: torch.Tensor, rho: torch.Tensor) -> list:
    """(r, tau fitted at r, relative error of rho there) for the ratios that say something about tau.

    Where r > 1 the gate 1 - sigmoid(u) is known only to ``negligible`` in absolute terms; a
    ratio whose gradient is within 10x of that says nothing about tau and is left out.
    """
    points = []
    for ri, pi in zip(r.tolist(), rho.tolist(), strict=True):
        if abs(ri - 1.0) < FIT_MIN_DISTANCE:
            continue
        abs_err = ctx.tol.negligible if ri > 1 else 0.0
        if ri > 1 and abs(pi) <= 10 * abs_err:
            continue
        points.append((ri, _fit_tau(ri, pi / ri), ctx.tol.tau + abs_err / abs(pi) if pi else math.inf))
    return points


def float32_value(x: float) -> float:
    """x as a float32 tensor holds it (a temperature written as torch.tensor(1.05) is 1.0499999523...)."""
    return float(torch.tensor(x, dtype=torch.float32))


def product_rule_shape(r: torch.Tensor, tau: float) -> torch.Tensor:
    """d [r w(r)] / d log r, normalised to 1 at r = 1: the shape when w is differentiated too (no stop-gradient)."""
    sig = torch.sigmoid(tau * (r - 1.0))
    w = 4 * sig * (1 - sig)
    return r * w + r * r * tau * w * (1 - 2 * sig)


def _shape_cause(ctx: Context, r: torch.Tensor, rho: torch.Tensor, tau: float) -> str:
    """The one mistake the measured g(r)/g(1) is, when it is one of the known ones."""
    tol = 10 * ctx.tol.grad
    if relative_error(rho, torch.ones_like(rho)) <= tol:
        return "ratio always 1, the behaviour log-probs are recomputed from the current policy"
    if relative_error(rho, product_rule_shape(r, tau)) <= tol:
        return "the gate w(r) is differentiated too (r w(r) without stop-gradient on w)"
    if relative_error(rho, 2 * torch.sigmoid(tau * (r - 1.0))) <= tol:
        return "g(r) is f(r), the surrogate's value, not its slope r f'(r) (a detached gate times log p)"
    if relative_error(rho, r) <= tol:
        return "g(r) = r, no gate at all (the unclipped ratio objective)"
    hint = max(20 * ctx.tol.grad, 1e-6)  # a reading of measured ratios: temperatures held in float32 included
    if relative_error(rho, 1.0 / torch.cosh(tau * torch.log(r) / 2) ** 2) <= hint:
        return ("the gate is on log r, sigmoid(tau log r), not on r - 1: its gradient sech^2(tau log r / 2) lacks "
                "the paper's factor r")
    return ""


def _temperature_rule_cause(ctx: Context, measured: dict) -> str:
    """A temperature picked per token by another rule than the sign of A, when that rule fits both signs' shapes.

    ``measured``: sign -> (r, g(r)/g(1)) for both signs. The rules differ only in which side of r = 1 takes tau_pos,
    so a rule read from one sign alone could be the reverse of what the other sign shows."""
    if ctx.tau_pos == ctx.tau_neg or len(measured) < 2:
        return ""
    hint = max(20 * ctx.tol.grad, 1e-6)
    rules = {
        "tau chosen by the side of r = 1 (tau_pos where r > 1, tau_neg where r < 1), not by the sign of A":
            lambda sign, r: r > 1,
        "tau chosen by the sign of A (r - 1) (tau_pos where A (r - 1) > 0, tau_neg elsewhere), not by the sign of A":
            lambda sign, r: sign * (r - 1) > 0,
    }
    for text, takes_pos in rules.items():
        fits = True
        for sign, (r, rho) in measured.items():
            tau = torch.where(takes_pos(sign, r), torch.tensor(ctx.tau_pos, dtype=torch.float64),
                              torch.tensor(ctx.tau_neg, dtype=torch.float64))
            fits &= relative_error(rho, update_coefficient(r, tau) / update_coefficient(r[:1], tau[:1])) <= hint
        if fits:
            return f"{text} (tau_pos = {ctx.tau_pos:g} for A > 0, tau_neg = {ctx.tau_neg:g} for A <= 0)"
    return ""


def shape_rows(ctx: Context) -> tuple[Row, Row, Row, Row]:
    """g(r) / g(1) on single-token responses (no aggregation or level effect) for each sign of A.

    A temperature held in float32 (1.05 stored as 1.0499999523) is recognised: the fit is
    compared with both, and the rest of the audit uses the value the loss holds.
    """
    shape_expected = "g(r)/g(1) = r sech^2(tau (r-1)/2) with the paper's tau"
    errors, details, values, temp_rows, causes, curves = {}, [], {}, [], {}, {}
    raised = set()  # the signs whose probe raised (the others in ``errors`` returned an unreadable gradient)
    failed_shape = False
    held = {}
    for sign, prop in ((1.0, TEMPERATURE_POS), (-1.0, TEMPERATURE_NEG)):
        tau = ctx.tau(sign)
        label = "A > 0" if sign > 0 else "A < 0"
        name = "tau_pos" if sign > 0 else "tau_neg"
        t_expected = f"tau = {fmt(tau)} ({name})"
        m = ctx.call(single_tokens(list(SHAPE_LOG_RATIOS), sign))
        if m.error:
            temp_rows.append(error_row(prop, t_expected, m.error))
            errors[label] = m.error
            raised.add(label)
            continue
        g = m.grad[:, 0]
        r = torch.exp(m.log_ratio[:, 0])
        if float(g[0]) == 0.0 or not bool(torch.isfinite(g).all()):
            measured = _unreadable(g)
            temp_rows.append(Row(prop, t_expected, f"not measurable: {measured}", "differs",
                                 summary=f"{prop}: not measurable, {measured}"))
            errors[label] = measured
            continue
        rho = g / g[0]
        curves[sign] = (r, rho)
        points = _fit_points(ctx, r, rho)
        fits = [(ri, t) for ri, t, _ in points]
        fitted, spread_ok, bound = _combine_fits(points)
        detail, summary, used = "", "", tau
        if spread_ok:
            ok = abs(fitted - tau) <= bound * tau
            narrow = float32_value(tau)
            if not ok and narrow != tau and math.isfinite(narrow) and abs(fitted - narrow) <= bound * narrow:
                ok, used = True, narrow
                detail = (f"the loss holds {name} in float32 ({narrow:.10g}, not {fmt(tau)}): it conforms to "
                          "float32's precision; hold tau in the log-probs' dtype for full float64 agreement")
                summary = (f"{name} is held in float32 ({narrow:.10g}): checked to float32's precision; hold "
                           "tau in the log-probs' dtype")
            measured = f"tau = {fitted:.10g}" if used != tau else f"tau = {fmt(fitted)}"
            measured += f" +- {bound * fitted:.2g}" if bound > 1e-6 else ""
            if not ok:
                detail = _temperature_hint(ctx, sign, fitted, bound)
                summary = f"{prop}: tau = {fitted:.4g} instead of {fmt(tau)}" + (f": {detail}" if detail else "")
            elif used == tau and ctx.tau(-sign) != tau and abs(ctx.tau(-sign) - tau) <= bound * tau:
                detail = f"in {ctx.dtype} tau_pos and tau_neg are not resolved from each other"
        else:
            ok = False
            measured = "no single tau fits: " + ", ".join(f"{fmt(t)} at r = {fmt(ri)}" for ri, t in fits)
            detail = ("the gradient is not SAPO's gate r sech^2(tau (r-1)/2) for any one tau "
                      "(nan: no tau reproduces that ratio)")
            summary = f"{prop}: no single tau fits the gradient's shape"
        held[sign] = used
        paper = update_coefficient(r, used) / update_coefficient(r[:1], used)
        err = relative_error(rho, paper)
        values[label] = {"ratios": r.tolist(), "measured": rho.tolist(), "paper": paper.tolist(), "max_rel_error": err}
        if err > 2 * ctx.tol.grad:  # a ratio of two measured gradients: twice the error of one
            failed_shape = True
            worst = int((rho - paper).abs().argmax())
            details.append(f"{label}: max rel. error {err:.3g}, worst at r = {fmt(float(r[worst]))}: "
                           f"{fmt(float(rho[worst]))} vs {fmt(float(paper[worst]))}")
            causes[label] = _shape_cause(ctx, r, rho, tau)
        temp_rows.append(Row(prop, t_expected, measured, verdict(ok), detail,
                             {"tau": fitted, "tau_held": used, "fits": [{"ratio": ri, "tau": t} for ri, t in fits]},
                             summary))
    if any(held.get(sign, ctx.tau(sign)) != ctx.tau(sign) for sign in (1.0, -1.0)):
        ctx.held_dtype = torch.float32
    ctx.tau_pos, ctx.tau_neg = held.get(1.0, ctx.tau_pos), held.get(-1.0, ctx.tau_neg)
    ctx.shape_ok = not failed_shape and not errors
    zero_row = _temperature_zero_row(ctx)
    if errors and len(raised) == 2:
        shape = error_row(GATE_SHAPE, shape_expected, "; ".join(f"{k}: {v}" for k, v in errors.items()))
    elif errors and len(errors) == 2:  # it returned, with nothing to read the shape from
        what = "; ".join(f"{k}: {'raised ' if k in raised else ''}{v}" for k, v in errors.items())
        shape = Row(GATE_SHAPE, shape_expected, f"not measurable: {what}", "differs",
                    "single-token responses at log r in " + str(list(SHAPE_LOG_RATIOS)),
                    summary=f"gradient shape r*w_tau(r) not measurable: {what}")
    else:
        ok = not failed_shape and not errors
        measured = "matches" if ok else "differs: " + "; ".join(details + [f"{k}: {v}" for k, v in errors.items()])
        if ok:
            measured += f" (max rel. error {max(v['max_rel_error'] for v in values.values()):.2g})"
        worst = max((v["max_rel_error"] for v in values.values()), default=math.nan)
        fitted_sapo = all(math.isfinite(r.values.get("tau", math.nan)) for r in temp_rows)
        summary = ""
        # a cause is named when it explains every sign whose shape differs (a sign-dependent rule: both signs)
        cause = _temperature_rule_cause(ctx, curves)
        if not cause and len(set(causes.values())) == 1 and not errors:
            cause = next(iter(causes.values()))
        ctx.shape_cause = cause if not ok else ""
        if not ok:
            if cause:
                summary = "gradient shape: " + cause
            elif fitted_sapo:
                summary = f"gradient shape: SAPO's gate with other temperatures (max rel. error {worst:.3g})"
            else:
                summary = f"gradient shape g(r)/g(1) off the paper's r sech^2(tau (r-1)/2) by up to {worst:.3g}"
        shape = Row(GATE_SHAPE, shape_expected, measured, verdict(ok),
                    "single-token responses at log r in " + str(list(SHAPE_LOG_RATIOS)), values, summary)
    return shape, temp_rows[0], temp_rows[1], zero_row


def _unreadable(g: torch.Tensor) -> str:
    """Why a gradient curve cannot be read, in the loss's own terms (it returned; it did not raise)."""
    if not bool(torch.isfinite(g).all()):
        return "non-finite gradient (" + ("nan" if bool(torch.isnan(g).any()) else "inf") + ")"
    if bool((g == 0).all()):
        return "zero gradient at every ratio"
    return "gradient at r = 1 is 0"


def _temperature_hint(ctx: Context, sign: float, fitted: float, bound: float) -> str:
    other = ctx.tau(-sign)
    if abs(fitted - other) <= bound * other and other != ctx.tau(sign):
        return "the other sign's tau (swapped, or one tau for both signs)"
    if abs(fitted * ctx.tau(sign) - 1.0) <= bound:
        return "1/tau: tau divides (r - 1) instead of multiplying it"
    return ""


def _temperature_zero_row(ctx: Context) -> Row:
    expected = "no effect: A = 0 gives gradient 0 whatever tau (the paper takes tau_neg)"
    m = ctx.call(single_tokens([0.0, 1.0, -0.75], 0.0))
    if m.error:
        return error_row(TEMPERATURE_ZERO, expected, m.error)
    g = m.grad[:, 0]
    if bool((g == 0).all()):
        return Row(TEMPERATURE_ZERO, expected, "not observable: gradient exactly 0", "pass")
    if float(g[0]) != 0.0 and bool(torch.isfinite(g).all()):
        r1 = math.exp(float(m.log_ratio[1, 0]))
        tau = _fit_tau(r1, float(g[1] / g[0]) / r1)
        return Row(TEMPERATURE_ZERO, expected, f"nonzero gradient (max |g| {float(g.abs().max()):.3g}); "
                   f"shape fits tau = {fmt(tau)}", "differs", values={"tau": tau},
                   summary=f"A = 0 gets a gradient (max |g| {float(g.abs().max()):.3g}): the advantage is shifted")
    return Row(TEMPERATURE_ZERO, expected, f"nonzero gradient {g.tolist()}", "differs",
               summary="A = 0 gets a gradient: the advantage is shifted or rescaled inside the loss")


def closed_form_rows(ctx: Context) -> tuple[Row, Row, Row, Row]:
    """Autograd and finite differences against -A c(rho) alpha; padding and old_logp get no gradient."""
    batch = make_batch([list(z) for z in CLOSED_FORM_LOG_RATIOS], list(CLOSED_FORM_ADVANTAGES))
    exp_grad = "-A r w_tau(r) alpha per token"
    if ctx.level == "sequence":
        exp_grad = "-A s w_tau(s) alpha per token, s = the response's geometric-mean ratio"
    m = ctx.call(batch)
    rows = []
    note = _weights_note(ctx) + "; batch of 4 responses of lengths 3, 1, 4, 2, A = 1.5, -0.5, 0.5, -1"
    if m.error:
        rows += [error_row(GRADIENT, exp_grad, m.error), error_row(FINITE_DIFFERENCES, exp_grad, m.error),
                 error_row(PADDING, "gradient exactly 0 on masked tokens", m.error)]
    else:
        expected = expected_gradient(m.log_ratio, batch, ctx.weights(batch.mask), ctx.tau_pos, ctx.tau_neg, ctx.level)
        valid = batch.mask
        err = relative_error(torch.where(valid, m.grad, torch.zeros_like(m.grad)), expected)
        rows.append(Row(GRADIENT, exp_grad + f" (rel. error <= {ctx.tol.grad:g})", f"max rel. error {err:.3g}",
                        verdict(err <= ctx.tol.grad), note, {"max_rel_error": err},
                        "" if err <= ctx.tol.grad else
                        f"per-token gradient differs from -A r w(r) alpha: max rel. error {err:.3g}"))
        rows.append(_fd_row(ctx, batch, expected, m.grad, rows[0]))
        pad = m.grad[~valid]
        pad_ok = bool((pad == 0).all())
        rows.append(Row(PADDING, "gradient exactly 0 on masked tokens",
                        "0" if pad_ok else f"max |gradient| {float(pad.abs().max()):.3g} on padding",
                        verdict(pad_ok), "" if pad_ok else "the mask is not applied to every token's loss",
                        {"max_abs_padding_gradient": float(pad.abs().max())},
                        "" if pad_ok else
                        f"padding gets a gradient (max {float(pad.abs().max()):.3g}): the mask is not applied"))
    rows.append(_old_logp_row(ctx, batch))
    return tuple(rows)


def _old_logp_row(ctx: Context, batch) -> Row:
    """A caller contract, not a check: the paper's objective takes old_logp as data; whether it carries a gradient
    is the caller's doing (every trainer audited computes it under no_grad)."""
    mo = ctx.call(batch, old_grad=True)
    expected = "old_logp is data: no gradient reaches it (the caller passes it without gradient)"
    if mo.error:
        return Row(OLD_LOGP, expected, f"not measured: {mo.error}", "info",
                   "the loss raised when old_logp required a gradient")
    worst = float(mo.old_grad.abs().max())
    if worst == 0:
        return Row(OLD_LOGP, expected, "none: the loss detaches old_logp itself", "info",
                   values={"max_abs_old_gradient": worst})
    return Row(OLD_LOGP, expected, f"max |d loss / d old_logp| = {worst:.3g} when old_logp requires a gradient",
               "info", "the loss computes logp - old_logp as written in the paper; it is right when the caller "
               "passes old_logp without gradient (detached, or computed under torch.no_grad())",
               {"max_abs_old_gradient": worst},
               "caller contract: pass old_logp without gradient (detached or from torch.no_grad()); "
               "this loss does not detach it")


def _kink_probe(ctx: Context, batch, step: float):
    """The value, autograd's gradient, and forward and backward differences of the value, on ``batch``."""
    base = ctx.call(batch)
    if base.error or not math.isfinite(base.value):
        return None
    fwd, bwd = torch.zeros_like(batch.logp), torch.zeros_like(batch.logp)
    for i, t in zip(*torch.nonzero(batch.mask, as_tuple=True), strict=True):
        vals = []
        for sign in (1.0, -1.0):
            shifted = batch.logp.clone()
            shifted[i, t] += sign * step
            m = ctx.call(Batch(shifted, batch.old, batch.adv, batch.mask), grad=False)
            if m.error or not math.isfinite(m.value):
                return None
            vals.append(m.value)
        fwd[i, t], bwd[i, t] = (vals[0] - base.value) / step, (base.value - vals[1]) / step
    return base, fwd, bwd


def _kink_reading(ctx: Context, batch) -> str:
    """When the value-vs-gradient check fails only where the value has a kink (a hard clamp's threshold), what that
    check should say; else ''."""
    probe = _kink_probe(ctx, batch, ctx.tol.fd_step)
    if probe is None:
        return ""
    base, fwd, bwd = probe
    grad = torch.where(batch.mask, base.grad, torch.zeros_like(base.grad))
    scale = float(grad.abs().max()) or 1.0
    kink = batch.mask & ((fwd - bwd).abs() > 0.05 * scale)
    if not bool(kink.any()):
        return ""
    smooth = batch.mask & ~kink
    central = (fwd + bwd) / 2
    if bool(smooth.any()) and float((central - grad)[smooth].abs().max()) > ctx.tol.fd * scale:
        return ""
    # at a kink autograd takes one side's slope: far closer to it than the jump between the two sides
    one_side = torch.minimum((grad - fwd).abs(), (grad - bwd).abs()) <= 0.1 * (fwd - bwd).abs()
    if not bool(one_side[kink].all()):
        return ""
    log_ratio = base.log_ratio.detach()
    z = sorted({round(float(log_ratio[i, t]), 4) for i, t in zip(*torch.nonzero(kink, as_tuple=True), strict=True)})
    return (f"matches the applied gradient except at {int(kink.sum())} token(s) on a kink of the value (log r = "
            f"{', '.join(f'{x:+g}' for x in z)}: a hard clamp's threshold), where autograd takes one side's slope")


def _fd_row(ctx: Context, batch, expected, autograd, gradient_row: Row) -> Row:
    """The value's derivative (central differences) against the gradient autograd applies: they must agree.

    Two readings replace a disagreement: a kink of the value (a hard clamp's threshold, where autograd takes one
    side's slope and a central difference averages both) passes; a value whose applied gradient is the paper's
    (gradient, on-policy factor and gate shape all conform) is a gradient-equivalent surrogate, told as a note.
    """
    tol = ctx.tol
    fd_expected = "finite differences of the value equal the applied (autograd) gradient"
    if tol.fd is None:
        return Row(FINITE_DIFFERENCES, fd_expected, f"not measured: a central difference is noise in {ctx.dtype}",
                   "info", "rerun with dtype=torch.float32 or float64 to check that the value matches the gradient")
    fd, error = finite_differences(ctx.loss_fn, batch, ctx.dtype, tol.fd_step, ctx.device)
    if error:
        return error_row(FINITE_DIFFERENCES, fd_expected, error)
    err = relative_error(fd, expected)
    vs_auto = relative_error(fd, autograd)
    ok = vs_auto <= tol.fd
    detail = f"step {tol.fd_step:g} in log p; finite differences vs the closed form: rel. error {err:.3g}"
    summary, measured, row_verdict = "", f"rel. error {vs_auto:.3g}", verdict(ok)
    if not ok:
        kink = _kink_reading(ctx, batch)
        if kink:
            row_verdict, measured = "pass", kink
            detail += ("; forward and backward differences disagree only at the kink, and elsewhere the central "
                       "difference is the applied gradient")
        elif gradient_row.verdict == "pass" and ctx.on_policy_ok and ctx.shape_ok:
            row_verdict = "info"
            summary = (f"gradient-equivalent: the applied gradient is the paper's (per-token {gradient_row.measured}"
                       f"), but the value is not its objective, a detached weight (the value's derivative is off by "
                       f"{measured}): training follows the paper; a logged loss value is not SAPO's")
        else:
            detail += ("; the value is not the function whose derivative is applied: part of the loss is detached "
                       "from its value")
            summary = (f"the value's derivative differs from the applied gradient (rel. error {vs_auto:.3g}): "
                       "a detached weight")
    return Row(FINITE_DIFFERENCES, fd_expected + f" (rel. error <= {tol.fd:g})", measured,
               row_verdict, detail, {"max_rel_error": err, "vs_autograd": vs_auto}, summary)
