"""Probe batches, one call of the audited loss, the paper's closed form, and the tolerances.

The audit only ever calls ``loss_fn(logp, old_logp, advantages, mask)`` and reads the
value and the gradient with respect to ``logp``. Probe values are chosen so that they are
exact in bfloat16 (small dyadic numbers) and every log-prob is <= 0, so that any dtype and
any framework that checks its inputs sees a valid batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Tolerances:
    """How far a measurement may sit from the paper before the audit says "differs".

    ``grad``: relative error of a gradient (or a ratio of two gradients) against the closed form.
    ``fd``: relative error of a central finite difference of the value (None: not meaningful).
    ``fd_step``: the finite-difference step in log p (a power of two, exact in the dtype).
    ``tau``: relative error of one gradient ratio in the temperature fit; a point whose gate
    w = sech^2(u/2) moves by s = |d ln w / d ln tau| = u tanh(u/2) per unit of ln tau pins
    tau down to ``tau / s``.
    ``aggregation``: residual of the best aggregation fit.
    ``negligible``: where r > 1 the gate 1 - sigmoid(u) cancels, so a plain implementation
    resolves the per-token coefficient only to this share of the on-policy gradient.
    ``extreme``: relative error allowed where r < 1 at extreme log ratios (no cancellation there,
    but a log-space implementation rounds log r itself in 16 bits).
    """

    grad: float
    fd: float | None
    fd_step: float
    tau: float
    aggregation: float
    negligible: float
    extreme: float


# float64 (eps 2.2e-16): a correct implementation differs from the closed form by rounding
# amplified by at most ~1e3 (the cancellation in 1 - sigmoid), so 1e-9 keeps a margin of
# 1e4 and stays 7 orders below the smallest difference that matters (tau 1.0 vs 1.05 moves
# the gradient at r = 2 by 2 %). FD: step 2^-17 gives truncation ~1e-11 and rounding ~1e-11.
# float32 (eps 1.2e-7) scales the same margins. In 16 bits a central difference of the value
# is noise (eps * |loss| / h is as large as the gradient), so it is not measured; a gradient
# ratio carries ~1 % error, so tau is known to a few % and tau_pos = 1.0 vs tau_neg = 1.05 is
# not reliably resolved; bfloat16 rounds |log r| = 64 to a spacing of 0.5 (a factor up to
# e^0.25 on the gradient), hence ``extreme`` = 0.5 there.
TOLERANCES = {
    torch.float64: Tolerances(grad=1e-9, fd=1e-6, fd_step=2.0**-17, tau=1e-9, aggregation=1e-9, negligible=1e-8,
                              extreme=1e-9),
    torch.float32: Tolerances(grad=1e-4, fd=2e-2, fd_step=2.0**-7, tau=1e-5, aggregation=1e-4, negligible=3e-4,
                              extreme=1e-4),
    torch.float16: Tolerances(grad=2e-2, fd=None, fd_step=0.0, tau=1e-2, aggregation=5e-3, negligible=3e-2,
                              extreme=0.5),
    torch.bfloat16: Tolerances(grad=5e-2, fd=None, fd_step=0.0, tau=2e-2, aggregation=2e-2, negligible=1e-1,
                               extreme=0.5),
}

# Current log-probs of the probe tokens, cycled; all <= -1.75 so that old = logp - z stays <= 0
# for every moderate log ratio z >= -1.5 the probes use.
LOGP_CYCLE = (-2.0, -3.0, -2.5, -4.0, -1.75)
PAD_LOGP, PAD_LOG_RATIO = -1.25, 0.5  # padding holds a finite, off-policy garbage value


@dataclass
class Batch:
    """A probe batch in float64 (cast to the audited dtype when called)."""

    logp: torch.Tensor  # (B, T)
    old: torch.Tensor  # (B, T)
    adv: torch.Tensor  # (B,)
    mask: torch.Tensor  # (B, T) bool


def make_batch(log_ratios: list, advantages: list, num_tokens: int | None = None) -> Batch:
    """One response per entry of ``log_ratios`` (its tokens' log r), right-padded to ``num_tokens``."""
    lengths = [len(z) for z in log_ratios]
    T = max(num_tokens or 0, max(lengths), 1)
    B = len(log_ratios)
    logp = torch.full((B, T), PAD_LOGP, dtype=torch.float64)
    old = torch.full((B, T), PAD_LOGP - PAD_LOG_RATIO, dtype=torch.float64)
    mask = torch.zeros((B, T), dtype=torch.bool)
    k = 0
    for i, zs in enumerate(log_ratios):
        for t, z in enumerate(zs):
            lp = LOGP_CYCLE[k % len(LOGP_CYCLE)]
            k += 1
            if z < lp:  # extreme negative log ratio: keep both log-probs <= 0
                lp = z - 1.0
            logp[i, t], old[i, t], mask[i, t] = lp, lp - z, True
    return Batch(logp, old, torch.tensor(advantages, dtype=torch.float64), mask)


def single_tokens(log_ratios: list, advantage: float) -> Batch:
    """One single-token response per log ratio, all with the same advantage."""
    return make_batch([[z] for z in log_ratios], [advantage] * len(log_ratios))


@dataclass
class Measurement:
    """One call of the adapter: its value, the gradients it produced, and the error if it raised."""
    value: float = math.nan
    grad: torch.Tensor | None = None  # d loss / d logp, float64, (B, T)
    old_grad: torch.Tensor | None = None  # d loss / d old_logp when requested
    log_ratio: torch.Tensor | None = None  # log r as the audited dtype holds it, float64
    error: str | None = None
    changed_inputs: tuple = ()  # the arguments the loss changed in place (it was given copies)


def _same_values(before: torch.Tensor, after: torch.Tensor) -> bool:
    same = before == after
    if before.is_floating_point():
        same |= before.isnan() & after.isnan()
    return bool(same.all())


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0]}" if msg else type(exc).__name__


def check_scalar(out) -> str | None:
    """Why ``out`` is not a scalar tensor, or None."""
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a scalar torch.Tensor"
    if out.numel() != 1:
        return f"returned a tensor of shape {tuple(out.shape)}, not a scalar"
    return None


def call(loss_fn, batch: Batch, dtype, device=None, *, grad: bool = True, old_grad: bool = False) -> Measurement:
    """Call the loss once; never raises (an exception becomes ``Measurement.error``)."""
    # copies: a loss that changes its arguments in place must not change the audit's batches
    logp = batch.logp.to(device=device, dtype=dtype, copy=True)
    old_leaf = batch.old.to(device=device, dtype=dtype, copy=True)
    m = Measurement(log_ratio=logp.double().cpu() - old_leaf.double().cpu())
    if grad:
        logp.requires_grad_(True)
    old = old_leaf
    if old_grad:  # a non-leaf copy, so that in-place operations inside the loss stay legal
        old_leaf.requires_grad_(True)
        old = old_leaf.clone()
    adv = batch.adv.to(device=device, dtype=dtype, copy=True)
    mask = batch.mask.to(device=device, copy=True)
    given = {"logp": logp, "old_logp": old, "advantages": adv, "mask": mask}
    before = {name: x.detach().clone() for name, x in given.items()}
    try:
        out = loss_fn(logp, old, adv, mask)
        m.changed_inputs = tuple(name for name, x in given.items() if not _same_values(before[name], x.detach()))
        problem = check_scalar(out)
        if problem:
            m.error = problem
            return m
        m.value = float(out.detach().double().reshape(()))
        if grad:
            inputs = [logp, old_leaf] if old_grad else [logp]
            if out.requires_grad:
                grads = torch.autograd.grad(out.reshape(()), inputs, allow_unused=True)
            else:  # a loss detached from logp has zero gradient
                grads = [None] * len(inputs)
            m.grad, *rest = [torch.zeros_like(x, dtype=torch.float64, device="cpu") if g is None
                             else g.detach().double().cpu() for x, g in zip(inputs, grads, strict=True)]
            if old_grad:
                m.old_grad = rest[0]
    except Exception as exc:  # the audit reports, it does not crash
        m.error = one_line(exc)
    return m


def finite_differences(loss_fn, batch: Batch, dtype, step: float, device=None) -> tuple[torch.Tensor | None, str | None]:
    """Central differences of the value in every log p_{i,t} (padding included), float64."""
    out = torch.zeros_like(batch.logp)
    for i in range(batch.logp.shape[0]):
        for t in range(batch.logp.shape[1]):
            vals = []
            for sign in (1.0, -1.0):
                shifted = batch.logp.clone()
                shifted[i, t] += sign * step
                m = call(loss_fn, Batch(shifted, batch.old, batch.adv, batch.mask), dtype, device, grad=False)
                if m.error:
                    return None, m.error
                vals.append(m.value)
            out[i, t] = (vals[0] - vals[1]) / (2 * step)
    return out, None


# ---- the paper's closed form, written from the formula (not from sapo_lab.objective.losses) ----

def update_coefficient(ratio: torch.Tensor, tau) -> torch.Tensor:
    """c_tau(r) = r * sech^2(tau (r - 1) / 2) = d f_tau(r) / d log r, with f_tau(r) = (4/tau) sigmoid(tau (r - 1))."""
    r = ratio.double()
    tau = torch.as_tensor(tau, dtype=torch.float64)
    return r / torch.cosh(tau * (r - 1.0) / 2.0) ** 2  # cosh overflows to inf for huge r: c = 0, not nan


def paper_temperature(adv: torch.Tensor, tau_pos: float, tau_neg: float) -> torch.Tensor:
    """tau_pos where A > 0, tau_neg where A <= 0 (review §5)."""
    return torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg)).double()


def sequence_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each token's response-mean log ratio (the log of the geometric-mean ratio), 0 on padding."""
    m = mask.double()
    mean = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1)
    return mean[:, None] * m


def expected_gradient(log_ratio, batch: Batch, weights, tau_pos, tau_neg, level: str) -> torch.Tensor:
    """d loss / d log p_{i,t} = -A_i c_tau(rho_{i,t}) alpha_{i,t}; rho is the token ratio or the response's geometric mean."""
    z = sequence_log_ratio(log_ratio, batch.mask) if level == "sequence" else log_ratio
    tau = paper_temperature(batch.adv, tau_pos, tau_neg)[:, None]
    c = update_coefficient(torch.exp(z), tau)
    return torch.where(batch.mask, -batch.adv[:, None] * c * weights, torch.zeros_like(c))


def relative_error(measured: torch.Tensor, expected: torch.Tensor) -> float:
    """max |measured - expected| over the probe, relative to the largest |expected| (inf if anything is non-finite)."""
    if not bool(torch.isfinite(measured).all()):
        return math.inf
    scale = float(expected.abs().max())
    return float((measured - expected).abs().max()) / (scale if scale > 0 else 1.0)
