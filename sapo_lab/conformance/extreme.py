"""Extreme log ratios: finite value and gradient, NaN, or a silent clamp (and where it starts).

Each point is a batch of two single-token responses with the same advantage: one at log r
= z, one on-policy. The on-policy token is the reference, so the ratio of their gradients
is c(e^z) / c(1) = c(e^z) under any aggregation and any constant factor.

What counts as a difference from the paper's c(e^z) = e^z sech^2(tau (e^z - 1) / 2):
for r < 1 the product e^z * sech^2 has no cancellation, so a plain implementation matches
it to relative precision even at log r = -100; for r > 1 the gate is 1 - sigmoid(u), which
any sigmoid-based implementation resolves only to an absolute share of the on-policy
gradient (``Tolerances.negligible``). A gradient that is exactly 0 where the paper's is
resolvable is a clamp or a skip; one frozen at its value at the threshold is a clamp that
keeps the gradient; NaN, inf and exceptions are reported as such.

A clamp or a skip is a difference only where it matters: past its threshold it changes a
token's gradient by at most c(e^threshold) of the on-policy gradient, and below ``MATERIAL``
(a clamp of log r at -20 changes it by 2e-9) it is reported, credited, and passes. In float32
exp(log r) overflows above log r = 88.72, so a plain implementation's gradient is NaN there,
which a clamp prevents.
"""

from __future__ import annotations

import math

import torch

from .card import Row
from .context import EXTREME, Context, error_row
from .probes import make_batch, update_coefficient

GRID = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)
REPORTED = (20.0, 50.0, 100.0)
BISECTION_STEPS = 40
MATERIAL = 1e-6  # a clamp that changes no token's gradient by more than this share of the on-policy one passes

# The same, as a measurement alone: what a card that names no cause says.
KIND_MEASURED = {
    "zero": "gradient exactly 0",
    "frozen": "gradient constant past it",
    "nonfinite": "NaN or inf in the value or gradient",
    "deviates": "gradient differs from the paper's",
}
KIND_TEXT = {
    "zero": "gradient exactly 0 (a clamp, or the token skipped)",
    "frozen": "gradient frozen at its threshold value (a clamp that keeps the gradient)",
    "nonfinite": "NaN or inf in the value or gradient",
    "deviates": "gradient differs from the paper's",
}


def _measure(ctx: Context, z: float, sign: float):
    """(state, ratio of gradients, error message, deviation from the paper's as a share of the on-policy gradient)
    at log r = z for advantage ``sign``."""
    m = ctx.call(make_batch([[z], [0.0]], [sign, sign]))
    if m.error:
        return "error", math.nan, m.error, math.nan
    x, ref = float(m.grad[0, 0]), float(m.grad[1, 0])
    if not (math.isfinite(m.value) and math.isfinite(x) and math.isfinite(ref)):
        return "nonfinite", math.nan, None, math.nan
    if ref == 0:  # no reference: other rows report the missing on-policy gradient
        return "ok", math.nan, None, math.nan
    rho = x / ref
    tau = ctx.tau(sign)
    z_held = float(m.log_ratio[0, 0])
    paper = float(update_coefficient(torch.tensor(math.exp(min(z_held, 700.0)), dtype=torch.float64), tau))
    if z_held < 0:  # no cancellation: relative precision, down to the dtype's smallest normal number
        atol = torch.finfo(ctx.dtype).tiny / abs(ref)
    else:
        atol = ctx.tol.negligible
    resolvable = abs(paper) > atol
    deviation = abs(rho - paper)  # rho is the on-policy gradient's multiple: a share of it
    if rho == 0.0 and resolvable:
        return "zero", rho, None, deviation
    rtol = ctx.tol.extreme if z_held < 0 else ctx.tol.grad
    # the allowance: a deviation this small is rounding however small the paper's value is there
    if ctx.shape_ok and deviation > rtol * abs(paper) + atol and deviation > ctx.tol.grad:
        return "deviates", rho, None, deviation
    return "ok", rho, None, deviation


def _threshold(ctx: Context, sign: float, good: float, bad: float) -> tuple[float, float]:
    """Bisect to the boundary; returns it and the gradient ratio just past it."""
    rho_bad = math.nan
    for _ in range(BISECTION_STEPS):
        if abs(bad - good) <= 1e-6 * max(1.0, abs(good)):
            break
        mid = (good + bad) / 2
        state, rho, _, _ = _measure(ctx, mid, sign)
        if state == "ok":
            good = mid
        else:
            bad, rho_bad = mid, rho
    return (good + bad) / 2, rho_bad


def _overflow_hint(ctx: Context, kind: str, thr: float) -> str:
    """Why a NaN appears where it does: past the dtype's exp range above r = 1 (a NaN below r = 1 is no overflow of
    exp(log r), which only underflows to 0 there)."""
    limit = math.log(torch.finfo(ctx.dtype).max)
    name = str(ctx.dtype).removeprefix("torch.")
    if kind != "nonfinite" or thr < limit - 0.05:
        return ""
    if abs(thr - limit) < 0.05:
        return f"exp(log r) overflows {name}; a clamp of log r (e.g. +-20) prevents it"
    return f"past {name}'s exp range (log r > {limit:.2f}); a clamp of log r (e.g. +-20) prevents it"


def extreme_row(ctx: Context) -> Row:
    """Extreme log-ratios: finite value and gradient, NaN, or a clamp, with the threshold found by bisection."""
    expected = (f"finite at every |log r| <= {GRID[-1]:g}, equal to the closed form (a clamp that changes no "
                f"gradient by more than {MATERIAL:g} of the on-policy one is credited)")
    findings, credited, values, points, plain = [], [], {}, {}, []
    summaries, notes = {}, {}  # one line per finding, the signs it holds for gathered
    for sign in (1.0, -1.0):
        label = "A > 0" if sign > 0 else "A < 0"
        values[label] = {}
        for side in (1.0, -1.0):
            states = [(side * g, *_measure(ctx, side * g, sign)) for g in GRID]
            for z, state, *_ in states:
                if abs(z) in REPORTED:
                    points[f"{label}, log r = {z:+g}"] = state
            if states[0][1] == "error":
                return error_row(EXTREME, expected, f"at log r = {states[0][0]:+g}: {states[0][3]}")
            first_bad = next((i for i, s in enumerate(states) if s[1] != "ok"), None)
            if first_bad is None:
                continue
            z_bad, kind, rho_bad, message, _ = states[first_bad]
            deviation = max((s[4] for s in states[first_bad:] if s[1] == "deviates"), default=math.nan)
            z_good = states[first_bad - 1][0] if first_bad else 0.0
            thr, rho_past = _threshold(ctx, sign, z_good, z_bad)
            if kind == "deviates" and abs(rho_bad - rho_past) <= 10 * ctx.tol.grad * abs(rho_past):
                kind = "frozen"  # the same gradient far past the threshold as just past it
            # how much a clamp or a skip changes a token's gradient past its threshold (on-policy = 1)
            impact = float(update_coefficient(torch.tensor(math.exp(min(thr, 700.0)), dtype=torch.float64),
                                              ctx.tau(sign)))
            harmless = kind in ("zero", "frozen") and impact <= max(MATERIAL, ctx.tol.grad)
            text = f"raises ({message})" if kind == "error" else KIND_TEXT[kind]
            where = "above" if side > 0 else "below"
            finding = f"{label}: {text} {where} log r = {thr:+.4f} (r = {math.exp(thr):.4g})"
            hint = _overflow_hint(ctx, kind, thr)
            short = {"zero": "gradient 0", "frozen": "gradient frozen", "nonfinite": "NaN",
                     "deviates": "gradient off the closed form", "error": "the loss raises"}[kind]
            if not harmless:
                plain.append(f"{label}: " + (text if kind == "error" else KIND_MEASURED[kind])
                             + f" {where} log r = {thr:+.4f}")
            if harmless:
                credited.append(f"{finding}; it changes the gradient by <= {impact:.2g} of the on-policy one")
                notes.setdefault(f"{short} {where} log r = {thr:+.2f}", [impact, []])[1].append(label)
            else:
                findings.append(finding + (f": {hint}" if hint else ""))
                why = hint or (f"a change of {impact:.2g} of the on-policy gradient" if kind in ("zero", "frozen")
                               else f"by up to {deviation:.2g} of the on-policy gradient (allowance "
                               f"{ctx.tol.grad:.0e})" if kind == "deviates" else "")
                summaries.setdefault(f"{short} {where} log r = {thr:+.2f}", [why, []])[1].append(label)
            values[label]["upper" if side > 0 else "lower"] = {"threshold": thr, "kind": kind, "impact": impact,
                                                               "harmless": harmless, "deviation": deviation}
    values["points"] = points
    at = ", ".join(f"{k}: {v}" for k, v in points.items() if v != "ok")
    detail = (f"grid {list(GRID)} on both sides of r = 1; thresholds by bisection to 1e-6"
              + (f"; states at +-20, +-50, +-100: {at}" if at else "")
              + ("" if ctx.shape_ok else "; the gate's shape differs, so only NaN, errors and exact zeros are judged"))
    if not findings:
        compared = "equal to the closed form" if ctx.shape_ok else "finite (values not compared: the shape differs)"
        measured = (f"{compared} at log r = +-20, +-50, +-100, both signs" if not credited
                    else "finite; harmless: " + "; ".join(credited))
        credit = max(MATERIAL, ctx.tol.grad)  # the card's allowance line states it
        note = "; ".join(f"{k} ({', '.join(signs)}) (harmless: the coefficient is below the allowance there, "
                         f"<= {impact:.2g} of the on-policy gradient, credited up to {credit:.0e})"
                         for k, (impact, signs) in notes.items())
        return Row(EXTREME, expected, measured, "pass", detail, values, note)
    summary = "; ".join(f"{k} ({', '.join(signs)})" + (f": {why}" if why else "") for k, (why, signs) in
                        summaries.items())
    values["measurement"] = "; ".join(plain)
    return Row(EXTREME, expected, "; ".join(findings + [f"credited: {c}" for c in credited]), "differs", detail,
               values, f"extreme log-ratios: {summary}")


def _near(measured: torch.Tensor, expected: torch.Tensor, tol: float) -> bool:
    return bool(torch.isfinite(measured).all()) and float((measured - expected).abs().max()) <= tol * max(
        1.0, float(expected.abs().max()))


def clamp_cause(shape: Row, extreme: Row, tau_pos: float, tau_neg: float, tol) -> str:
    """A clamp of r (or log r) with its thresholds, read from the extreme-ratio row's bisection, when the gate-shape
    row's measured gradient is the paper's inside the clamp and exactly 0 outside; else ''."""
    hint_tol = max(20 * tol.grad, 1e-6)  # a reading of measured ratios: temperatures held in float32 included
    values = extreme.values if isinstance(extreme.values, dict) else {}
    sides = {}
    for label in ("A > 0", "A < 0"):
        for side in ("lower", "upper"):
            v = values.get(label, {}).get(side) if isinstance(values.get(label), dict) else None
            if v and v.get("kind") == "zero" and not v.get("harmless"):
                sides.setdefault((side, round(float(v["threshold"]), 4)), []).append(label)
    measured = shape.values if isinstance(shape.values, dict) else {}
    if not sides or shape.verdict != "differs":
        return ""
    for label, tau in (("A > 0", tau_pos), ("A < 0", tau_neg)):
        v = measured.get(label)
        if not v or "ratios" not in v:
            return ""
        r = torch.tensor(v["ratios"], dtype=torch.float64)
        rho = torch.tensor([float(x) for x in v["measured"]], dtype=torch.float64)
        paper = update_coefficient(r, tau) / update_coefficient(r[:1], tau)
        inside = rho != 0
        if not _near(rho[inside], paper[inside], hint_tol):
            return ""
    parts = []
    for (side, z), labels in sorted(sides.items(), key=lambda kv: kv[0][1]):
        word = "below" if side == "lower" else "above"
        parts.append(f"{word} r = {math.exp(z):.4g} (log r {z:+.4f}) for {' and '.join(labels)}")
    return "a clamp of the ratio (of r or log r): gradient 0 " + "; ".join(parts)
