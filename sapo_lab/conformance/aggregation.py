"""Which token weights a loss uses, identified from its gradients at r = 1.

At r = 1 every SAPO token has the same coefficient (token or sequence level), so the
gradient of token (i, t) is -A_i k alpha_{i,t}: the aggregation weight times one constant
k. Probes with different lengths, paddings and response counts make each candidate's
weights non-proportional to every other's; the audit fits k per candidate and keeps the
one whose residual vanishes.
"""

from __future__ import annotations

import torch

from .probes import Batch, Measurement, call, make_batch

PAPER_AGGREGATION = "per_response_mean"

# name -> (description, weight of one token given its response length L, the number of
# responses N, the padded length T, the total token count and the longest response).
FAMILIES = {
    "per_response_mean": ("per-response mean: mean over each response's tokens, then over responses",
                          lambda L, N, T, total, longest: 1.0 / (L * N)),
    "token_pool": ("token pool: one mean over every token in the batch",
                   lambda L, N, T, total, longest: 1.0 / total),
    "padded_length_mean": ("fixed length: each response's sum / padded length T, then mean over responses",
                           lambda L, N, T, total, longest: 1.0 / (T * N)),
    "padded_length_sum": ("fixed length: sum over all tokens / padded length T",
                          lambda L, N, T, total, longest: 1.0 / T),
    "longest_response_mean": ("each response's sum / longest response length, then mean over responses",
                              lambda L, N, T, total, longest: 1.0 / (longest * N)),
    "response_sum_mean": ("per-response sum, then mean over responses (or / a constant)",
                          lambda L, N, T, total, longest: 1.0 / N),
    "sum": ("sum over all tokens (or / a constant)", lambda L, N, T, total, longest: 1.0),
}

# Lengths chosen so that no two families are proportional across the three probes:
# P2 only adds padding, P3 changes N, the total and the longest response.
PROBE_SHAPES = (((1, 2, 4, 5), 6), ((1, 2, 4, 5), 9), ((3, 4, 6), 6))


def family_weights(family: str, mask: torch.Tensor, count_empty: bool = False) -> torch.Tensor:
    """alpha_{i,t} of one family (its natural constant 1), 0 on padding; empty responses are not counted unless asked."""
    fn = FAMILIES[family][1]
    lengths = mask.sum(-1)
    n = int(lengths.numel()) if count_empty else int((lengths > 0).sum())
    total, longest, T = int(lengths.sum()), int(lengths.max()), mask.shape[-1]
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for i, L in enumerate(lengths.tolist()):
        if L:
            out[i, :] = fn(L, n, T, total, longest)
    return out * mask


def probe_batches() -> list[Batch]:
    """On-policy (log r = 0) batches, A = 1, with the lengths of PROBE_SHAPES."""
    return [make_batch([[0.0] * L for L in lengths], [1.0] * len(lengths), T) for lengths, T in PROBE_SHAPES]


def identify(loss_fn, dtype, device, tol: float) -> dict:
    """Fit every family to the measured gradients; returns name, scale k, residuals, or an error."""
    batches = probe_batches()
    measured: list[Measurement] = [call(loss_fn, b, dtype, device) for b in batches]
    for m in measured:
        if m.error:
            return {"error": m.error}
    g = torch.cat([-m.grad[b.mask] for m, b in zip(measured, batches, strict=True)])  # -grad / A, A = 1
    if not bool(torch.isfinite(g).all()):
        return {"name": "non-finite", "residuals": {}, "scale": float("nan"), "weights": _per_response(measured, batches)}
    if float(g.abs().max()) == 0.0:
        return {"name": "zero", "residuals": {}, "scale": 0.0, "weights": _per_response(measured, batches)}
    residuals, scales = {}, {}
    for name in FAMILIES:
        a = torch.cat([family_weights(name, b.mask)[b.mask] for b in batches])
        k = float((g * a).sum() / (a * a).sum())
        scales[name] = k
        residuals[name] = float((g - k * a).abs().max() / g.abs().max())
    best = min(residuals, key=residuals.get)
    name = best if residuals[best] <= tol else "other"
    return {"name": name, "scale": scales.get(name, float("nan")), "residuals": residuals,
            "weights": _per_response(measured, batches)}


def _per_response(measured, batches) -> list:
    """Each probe's measured weight of one token per response, relative to the probe's first response."""
    out = []
    for m, b in zip(measured, batches, strict=True):
        first = [float(-m.grad[i][b.mask[i]][0]) for i in range(b.mask.shape[0])]
        out.append([x / first[0] if first[0] else float("nan") for x in first])
    return out
