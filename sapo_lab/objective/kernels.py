"""Ablation kernels for review §14.2: which part of SAPO's gate does the work?

The review notes that GRPO's hard clip and SAPO's soft gate differ in two ways at once:
smooth versus hard, and *bidirectional* versus *directional*. PPO's clip only cuts the
side where a step would push the ratio further in the direction the advantage already
favours (A > 0: r > 1 + eps_high; A < 0: r < 1 - eps_low); on the other side the
unclipped update passes. SAPO attenuates both sides. Four kernels separate the effects,
each described by its gate ``w(r)`` (the multiplier on the unclipped importance-weighted
update ``A r grad log p``, so the token's coefficient on ``grad log p`` is ``r w(r)``):

* directional hard clip, ``grpo``: 1 on the live side of the clip, 0 past its bound;
* directional smooth clip, ``sapo_directional``: w_tau(r) on the cut side, 1 on the other;
* bidirectional smooth attenuation, ``sapo``: w_tau(r) = sech^2(tau (r - 1) / 2) on both sides;
* another smooth kernel, ``gauss``: exp(-(r - 1)^2 / (2 sigma_tau^2)) on both sides.

The "cut side" of ``sapo_directional`` is ``r > 1`` for A > 0 and ``r < 1`` for A < 0
(for A = 0 nothing is learned, whichever gate). It uses SAPO's gate from r = 1 on, not
from the clip bound, so that ``sapo`` and ``sapo_directional`` differ *only* on the
corrective side, and ``grpo`` and ``sapo_directional`` differ only on the cut side.

The Gaussian kernel is a different smooth shape with the same local behaviour at r = 1:
both gates equal 1 there with zero slope (so the surrogate's slope is 1: the first-order
update is the unclipped one) and both fall to 1/2 at the same distance,
``|r - 1| = 2 asinh(1) / tau``. That fixes ``sigma_tau = 2 asinh(1) / (tau sqrt(2 ln 2))``.
What is left to differ is the shape away from the centre: the Gaussian's tails fall like
``exp(-(r - 1)^2)`` instead of ``exp(-tau |r - 1|)``, so at equal width it is *more*
conservative far from on-policy and slightly less so in between. Its surrogate has a
closed form (erf), and it is the textbook bell curve, so it is the natural second shape.

Every kernel uses SAPO's sign rule for its temperature (tau_pos where A > 0, tau_neg where
A <= 0). The surrogates are centred (zero at r = 1), like :func:`sapo_lab.objective.gates.sapo_token_surrogate`.
"""

from __future__ import annotations

import math

import torch

from ..half_width import SAPO_HALF_WIDTH_TIMES_TAU
from ..half_width import sapo_half_width as sapo_half_width  # stated here beside the kernels; no torch in its home
from .gates import _as_tensor, check_temperature, log_gate_weight, sapo_token_surrogate

_SQRT_2LN2 = math.sqrt(2.0 * math.log(2.0))


def gaussian_width(tau):
    """sigma_tau such that exp(-(r-1)^2 / (2 sigma^2)) has SAPO's half-width at temperature tau (a tensor or a number)."""
    check_temperature(tau)
    return SAPO_HALF_WIDTH_TIMES_TAU / tau / _SQRT_2LN2


def gaussian_gate_weight(ratio, tau) -> torch.Tensor:
    """The Gaussian kernel's gate exp(-(r - 1)^2 / (2 sigma_tau^2)), in (0, 1], 1 at r = 1."""
    r = _as_tensor(ratio)
    sigma = _as_tensor(gaussian_width(_as_tensor(tau, r)), r)
    return torch.exp(-((r - 1.0) ** 2) / (2.0 * sigma**2))


def gaussian_surrogate(ratio, tau) -> torch.Tensor:
    """Centred Gaussian-kernel surrogate sigma sqrt(pi/2) erf((r - 1) / (sigma sqrt 2)); d/dr = gate."""
    r = _as_tensor(ratio)
    sigma = _as_tensor(gaussian_width(_as_tensor(tau, r)), r)
    return sigma * math.sqrt(math.pi / 2.0) * torch.erf((r - 1.0) / (sigma * math.sqrt(2.0)))


def hard_clip_cut_side(ratio, adv) -> torch.Tensor:
    """True on the side of r = 1 that PPO's clip would eventually cut: r > 1 for A > 0, r < 1 for A < 0."""
    r = _as_tensor(ratio)
    a = _as_tensor(adv, r)
    return ((a > 0) & (r > 1.0)) | ((a < 0) & (r < 1.0))


def directional_gate_weight(ratio, adv, tau) -> torch.Tensor:
    """Directional smooth clip: SAPO's gate w_tau(r) on the cut side, 1 (no attenuation) on the other."""
    r = _as_tensor(ratio)
    w = torch.exp(log_gate_weight(r, tau))
    return torch.where(hard_clip_cut_side(r, adv), w, torch.ones_like(w))


def directional_surrogate(ratio, adv, tau) -> torch.Tensor:
    """Centred directional surrogate: SAPO's (2/tau) tanh(tau (r-1)/2) on the cut side, r - 1 elsewhere."""
    r = _as_tensor(ratio)
    tau = _as_tensor(tau, r)
    soft = (2.0 / tau) * torch.tanh(tau * (r - 1.0) / 2.0)
    return torch.where(hard_clip_cut_side(r, adv), soft, r - 1.0)


# --- log-space versions used by policy_loss ----------------------------------------------------

def log_gaussian_gate_from_log_ratio(log_ratio: torch.Tensor, tau) -> torch.Tensor:
    """log of the Gaussian gate at r = e^z: -(e^z - 1)^2 / (2 sigma^2); -inf where e^z overflows."""
    sigma = gaussian_width(tau)
    return -(torch.expm1(log_ratio) ** 2) / (2.0 * sigma**2)


def log_directional_gate_from_log_ratio(log_ratio: torch.Tensor, adv: torch.Tensor, tau) -> torch.Tensor:
    """log of the directional gate at r = e^z: log w_tau on the cut side, 0 on the other."""
    cut = ((adv > 0) & (log_ratio > 0)) | ((adv < 0) & (log_ratio < 0))
    log_w = log_gate_weight(torch.exp(log_ratio), tau)
    return torch.where(cut, log_w, torch.zeros_like(log_w))


class _CentredGaussianGate(torch.autograd.Function):
    """sigma sqrt(pi/2) erf(expm1(z) / (sigma sqrt 2)) with d/dz = exp(z + log gate), in log space.

    Plain autograd would give 0 * inf = NaN where e^z overflows; the backward here is exactly 0
    there. It uses differentiable torch ops, so double backward works.
    """

    @staticmethod
    def forward(ctx, z, tau):
        ctx.save_for_backward(z, tau)
        sigma = gaussian_width(tau)
        return sigma * math.sqrt(math.pi / 2.0) * torch.erf(torch.expm1(z) / (sigma * math.sqrt(2.0)))

    @staticmethod
    def backward(ctx, grad_out):
        z, tau = ctx.saved_tensors
        return grad_out * torch.exp(z + log_gaussian_gate_from_log_ratio(z, tau)), None


def gaussian_token_surrogate(log_ratio: torch.Tensor, tau) -> torch.Tensor:
    """Centred Gaussian-kernel surrogate as a function of the log ratio (an objective to maximize)."""
    tau = torch.as_tensor(tau, dtype=log_ratio.dtype, device=log_ratio.device)
    tau = torch.broadcast_to(tau, log_ratio.shape).contiguous()
    return _CentredGaussianGate.apply(log_ratio, tau)


def directional_token_surrogate(log_ratio: torch.Tensor, adv: torch.Tensor, tau) -> torch.Tensor:
    """Directional smooth clip as a function of the log ratio (an objective to maximize).

    SAPO's centred gate on the side the hard clip would cut (z > 0 for A > 0, z < 0 for
    A < 0), the unclipped ``e^z - 1`` on the other. Each branch sees a masked copy of z,
    so a branch not taken never meets a huge e^z (0 * inf in the backward); A = 0 tokens
    take the soft branch, whose coefficient is always finite (their loss is 0 anyway).
    """
    with torch.no_grad():
        identity = ((adv > 0) & (log_ratio <= 0)) | ((adv < 0) & (log_ratio >= 0))
    zeros = torch.zeros_like(log_ratio)
    soft = sapo_token_surrogate(torch.where(identity, zeros, log_ratio), tau)
    return torch.where(identity, torch.expm1(torch.where(identity, log_ratio, zeros)), soft)
