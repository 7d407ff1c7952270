"""Response masks and the two ways of averaging token losses into one number.

``per_response``: mean over each response's valid tokens, then mean over the
non-empty responses (the SAPO paper's displayed objective, and TRL's
``loss_type="sapo"`` when no response is empty).
``token_pool``: one mean over every valid token in the batch, so a long response
weighs in proportion to its length.
"""

from __future__ import annotations

import torch

from .choices import AGGREGATIONS


def check_mask(mask: torch.Tensor) -> torch.Tensor:
    """Return the mask as a bool tensor, refusing anything that is not 0/1."""
    if mask.dtype == torch.bool:
        return mask
    m = mask.detach()
    if not bool(((m == 0) | (m == 1)).all()):
        bad = sorted({float(v) for v in m[(m != 0) & (m != 1)].flatten()[:5].tolist()})
        raise ValueError(f"mask must contain only 0 and 1, found values {bad}")
    return m != 0


def mask_from_lengths(lengths, num_tokens: int) -> torch.Tensor:
    """Right-padded 0/1 mask (as bool) with ``lengths[i]`` valid tokens in row i."""
    lengths = torch.as_tensor(lengths)
    if lengths.ndim != 1 or bool((lengths < 0).any()) or bool((lengths > num_tokens).any()):
        raise ValueError(f"lengths must be a 1-D sequence of integers in [0, {num_tokens}], got {lengths.tolist()}")
    return torch.arange(num_tokens)[None, :] < lengths[:, None]


def response_lengths(mask: torch.Tensor) -> torch.Tensor:
    """Valid tokens per response, L_i = sum_t m_{i,t}."""
    return mask.to(torch.int64).sum(dim=-1)


def aggregation_weights(mask: torch.Tensor, aggregation: str = "per_response", dtype=None) -> torch.Tensor:
    """Per-token weights alpha_{i,t} such that the batch loss is sum_{i,t} alpha_{i,t} * loss_{i,t}.

    per_response: alpha = m / (L_i * N) with N the number of non-empty responses.
    token_pool:   alpha = m / sum(m).
    Padding and empty responses get weight exactly 0.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    m = check_mask(mask)
    dtype = dtype or torch.get_default_dtype()
    mf = m.to(dtype)
    lengths = mf.sum(dim=-1, keepdim=True)
    total = mf.sum()
    if float(total) == 0:
        raise ValueError("mask selects no valid token: every response is empty")
    if aggregation == "token_pool":
        return mf / total
    non_empty = (lengths > 0).sum()
    return mf / (lengths.clamp(min=1) * non_empty)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, aggregation: str = "per_response") -> torch.Tensor:
    """Aggregate per-token values with :func:`aggregation_weights` (padding values are ignored, even NaN)."""
    w = aggregation_weights(mask, aggregation, dtype=values.dtype)
    return torch.where(w > 0, values * w, torch.zeros_like(values)).sum()
