"""PPO/GRPO's clipped surrogate and its exact piecewise derivative in the ratio."""

from __future__ import annotations

import torch

from .gates import _as_tensor


def check_clip_eps(eps_low, eps_high) -> None:
    """Refuse clip widths that make the clip band empty or inverted (``ValueError``)."""
    if not (0.0 <= float(eps_low) < 1.0) or not (float(eps_high) >= 0.0):
        raise ValueError(
            f"clip epsilons must satisfy 0 <= eps_low < 1 and eps_high >= 0, got {eps_low!r}, {eps_high!r}"
        )


def ppo_clip_surrogate(ratio, adv, eps_low: float = 0.2, eps_high: float = 0.2) -> torch.Tensor:
    """min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A) (an objective to maximize)."""
    check_clip_eps(eps_low, eps_high)
    r = _as_tensor(ratio)
    a = _as_tensor(adv, r)
    return torch.minimum(r * a, torch.clamp(r, 1.0 - eps_low, 1.0 + eps_high) * a)


def clip_is_active(ratio, adv, eps_low: float = 0.2, eps_high: float = 0.2) -> torch.Tensor:
    """True where the clipped surrogate still passes a gradient in r (the clip is *not* binding).

    For A > 0 the surrogate is A * min(r, 1 + eps_high): live while r < 1 + eps_high.
    For A < 0 it is A * max(r, 1 - eps_low): live while r > 1 - eps_low.
    For A = 0 the derivative is 0 everywhere; we report it as inactive.
    Exactly at a boundary the one-sided derivatives differ; we count the boundary as
    clipped (no gradient), as :func:`sapo_lab.policy_loss` does. (Plain autograd through
    :func:`ppo_clip_surrogate` happens to pass the full gradient at that tie.)
    """
    check_clip_eps(eps_low, eps_high)
    r = _as_tensor(ratio)
    a = _as_tensor(adv, r)
    return ((a > 0) & (r < 1.0 + eps_high)) | ((a < 0) & (r > 1.0 - eps_low))


def ppo_clip_derivative(ratio, adv, eps_low: float = 0.2, eps_high: float = 0.2) -> torch.Tensor:
    """d/dr of :func:`ppo_clip_surrogate`: A where the clip is inactive, 0 where it saturates."""
    r = _as_tensor(ratio)
    a = _as_tensor(adv, r)
    a = torch.broadcast_to(a, torch.broadcast_shapes(a.shape, r.shape))
    return torch.where(clip_is_active(r, a, eps_low, eps_high), a, torch.zeros_like(a))


def clip_token_surrogate(log_ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float):
    """min(rA, clip(r)A) / A written so that saturated tokens never touch exp(z).

    Returns (surrogate without the factor A, active mask). Where the clip is active the
    surrogate is r and its z-derivative is r; elsewhere it is the constant bound.
    """
    with torch.no_grad():
        r = torch.exp(log_ratio)
        active = ((adv > 0) & (r < 1.0 + eps_high)) | ((adv < 0) & (r > 1.0 - eps_low))
        bound = torch.where(adv > 0, torch.full_like(r, 1.0 + eps_high), torch.full_like(r, 1.0 - eps_low))
    safe_z = torch.where(active, log_ratio, torch.zeros_like(log_ratio))
    return torch.where(active, torch.exp(safe_z), bound), active
