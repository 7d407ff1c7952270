"""SAPO's soft gate and the weights it puts on the score function.

For a temperature ``tau > 0`` and a token ratio ``r = p / b`` the SAPO surrogate is

    f_tau(r) = (4 / tau) * sigmoid(tau * (r - 1)),

whose derivative in ``r`` is the gate weight

    w_tau(r) = 4 * sigmoid(u) * (1 - sigmoid(u)) = sech^2(u / 2),   u = tau * (r - 1).

Because ``d r / d log p = r``, the multiplier on ``grad log p`` is the update
coefficient ``c(r) = r * w_tau(r)``. Every function here works on torch tensors
(float32 or float64, any device) and is written so that large ``|u|`` neither
overflows nor produces ``0 * inf``.
"""

from __future__ import annotations

import math

import torch

LOG_4 = math.log(4.0)


def _as_tensor(x, like: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    dtype = like.dtype if like is not None else torch.get_default_dtype()
    device = like.device if like is not None else None
    return torch.as_tensor(x, dtype=dtype, device=device)


def check_temperature(tau) -> None:
    """Raise ``ValueError`` unless every temperature is finite and strictly positive."""
    t = _as_tensor(tau)
    if not bool(torch.isfinite(t).all()) or not bool((t > 0).all()):
        raise ValueError(f"temperature tau must be finite and > 0, got {tau!r}")


def soft_gate(ratio, tau) -> torch.Tensor:
    """The SAPO surrogate f_tau(r) = (4/tau) * sigmoid(tau * (r - 1))."""
    check_temperature(tau)
    r = _as_tensor(ratio)
    tau = _as_tensor(tau, r)
    return (4.0 / tau) * torch.sigmoid(tau * (r - 1.0))


def centered_soft_gate(ratio, tau) -> torch.Tensor:
    """f_tau(r) - 2/tau: zero at r = 1, same derivative as :func:`soft_gate`."""
    check_temperature(tau)
    r = _as_tensor(ratio)
    tau = _as_tensor(tau, r)
    # sigmoid(u) - 1/2 == tanh(u/2) / 2, which keeps full precision near u = 0.
    return (2.0 / tau) * torch.tanh(tau * (r - 1.0) / 2.0)


def softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x) = max(x, 0) + log1p(e^-|x|), exact for every x.

    ``torch.nn.functional.softplus`` returns x itself above a threshold of 20, an
    approximation whose relative error (about e^-20) would show up in w.
    """
    return torch.clamp(x, min=0) + torch.log1p(torch.exp(-torch.abs(x)))


def log_gate_weight(ratio, tau) -> torch.Tensor:
    """log w_tau(r) = log 4 - softplus(u) - softplus(-u), finite for every finite u."""
    check_temperature(tau)
    r = _as_tensor(ratio)
    tau = _as_tensor(tau, r)
    u = tau * (r - 1.0)
    return LOG_4 - softplus(u) - softplus(-u)


def gate_weight(ratio, tau) -> torch.Tensor:
    """w_tau(r) = 4 sigmoid(u)(1 - sigmoid(u)), computed as exp(log w) so tails underflow to 0 cleanly."""
    return torch.exp(log_gate_weight(ratio, tau))


def log_update_coefficient_from_log_ratio(log_ratio, tau) -> torch.Tensor:
    """log(r * w_tau(r)) with r = exp(log_ratio), valid even where exp(log_ratio) overflows.

    When r overflows, u = +inf and log w = -inf, so the sum is -inf and the coefficient
    is exactly 0 -- the true value underflows long before r does.
    """
    z = _as_tensor(log_ratio)
    return z + log_gate_weight(torch.exp(z), tau)


def update_coefficient(ratio, tau) -> torch.Tensor:
    """c(r) = r * w_tau(r): the multiplier on grad log p that SAPO actually applies."""
    r = _as_tensor(ratio)
    out = r * gate_weight(r, tau)
    # r = inf gives inf * 0; the limit of r * w(r) as r -> inf is 0.
    return torch.where(torch.isinf(r) & (r > 0), torch.zeros_like(out), out)


class _CentredSoftGate(torch.autograd.Function):
    """(2/tau) tanh(tau (e^z - 1) / 2) with d/dz = e^z w_tau(e^z), computed in log space.

    The backward uses differentiable torch ops, so double backward (Hessians,
    meta-gradients) works too.
    """

    @staticmethod
    def forward(ctx, z, tau):
        ctx.save_for_backward(z, tau)
        return (2.0 / tau) * torch.tanh(tau * torch.expm1(z) / 2.0)

    @staticmethod
    def backward(ctx, grad_out):
        z, tau = ctx.saved_tensors
        return grad_out * torch.exp(log_update_coefficient_from_log_ratio(z, tau)), None


def token_temperatures(token_adv: torch.Tensor, tau_pos: float, tau_neg: float) -> torch.Tensor:
    """SAPO's sign rule: tau_pos where A > 0, tau_neg where A <= 0 (a constant under autograd)."""
    return torch.where(token_adv > 0, torch.full_like(token_adv, float(tau_pos)), torch.full_like(token_adv, float(tau_neg)))


def sapo_token_surrogate(log_ratio: torch.Tensor, tau) -> torch.Tensor:
    """Centred SAPO surrogate as a function of the log ratio (an objective to maximize)."""
    tau = torch.as_tensor(tau, dtype=log_ratio.dtype, device=log_ratio.device)
    tau = torch.broadcast_to(tau, log_ratio.shape).contiguous()
    return _CentredSoftGate.apply(log_ratio, tau)
