"""Group-relative advantages: each response is scored against the other answers to its prompt."""

from __future__ import annotations

import torch


def group_advantages(rewards, eps: float = 1e-6) -> torch.Tensor:
    """(R_i - mean) / (std + eps) within each group, with the population std.

    ``rewards`` is shaped (num_prompts, group_size). A group whose rewards are all
    equal gets advantages of exactly 0 (never NaN): the centred rewards are exactly
    zero, so the quotient is zero whatever the denominator.
    """
    r = torch.as_tensor(rewards)
    if not torch.is_floating_point(r):
        r = r.to(torch.get_default_dtype())
    if r.ndim != 2:
        raise ValueError(f"rewards must be shaped (num_prompts, group_size), got shape {tuple(r.shape)}")
    if r.shape[0] == 0 or r.shape[1] == 0:
        raise ValueError(f"rewards must be non-empty, got shape {tuple(r.shape)}")
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    bad = ~torch.isfinite(r)
    if bool(bad.any()):
        where = [tuple(int(i) for i in idx) for idx in bad.nonzero()[:5]]
        raise ValueError(f"rewards contain NaN or inf at (prompt, response) {where}")
    mean = r.mean(dim=1, keepdim=True)
    centred = r - mean
    # Exact zero for equal groups even if the mean rounds: compare against the max spread.
    equal = (r.max(dim=1, keepdim=True).values == r.min(dim=1, keepdim=True).values)
    centred = torch.where(equal, torch.zeros_like(centred), centred)
    std = centred.pow(2).mean(dim=1, keepdim=True).sqrt()
    return centred / (std + eps)
