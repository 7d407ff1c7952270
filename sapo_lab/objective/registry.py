"""The kernel registry: one row per ``loss_type``, read by everything that depends on it.

A kernel is the per-token surrogate ``s(z)`` that :func:`sapo_lab.policy_loss` applies to the
log ratio ``z`` (the token's, or at sequence level its response's mean), together with what
the rest of the package needs to know about it: the settings it reads, its gate ``w(r)`` for
the statistics, whether that gate is a hard clip, the importance-sampling levels it is
defined at, and its TRL name. ``policy_loss`` and its statistics, the metrics row, the
gradient comparison, config validation and the TRL export all read :data:`KERNELS`, so a new
kernel is one new row here (plus its surrogate in :mod:`~sapo_lab.objective.gates`,
:mod:`~sapo_lab.objective.clip` or :mod:`~sapo_lab.objective.kernels`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .choices import IMPORTANCE_SAMPLING_LEVELS
from .clip import check_clip_eps, clip_token_surrogate
from .gates import check_temperature, log_gate_weight, sapo_token_surrogate, token_temperatures
from .kernels import (
    directional_token_surrogate,
    gaussian_token_surrogate,
    log_directional_gate_from_log_ratio,
    log_gaussian_gate_from_log_ratio,
)

# The policy_loss settings a kernel may read, in the order its functions take them.
TEMPERATURES = ("tau_pos", "tau_neg")
CLIP_EPSILONS = ("clip_eps_low", "clip_eps_high")


@dataclass(frozen=True)
class Kernel:
    """One ``loss_type``. The functions take the settings named in ``reads``, positionally, after the tensors."""

    name: str
    summary: str  # one line: the gate and the sides it acts on
    reads: tuple[str, ...]  # policy_loss settings it uses (TEMPERATURES or CLIP_EPSILONS)
    check: Callable  # (*settings) -> None; ValueError naming the setting
    # (z, token advantages, *settings) -> (surrogate s(z), gate state): what log_weights needs per token
    token_surrogate: Callable
    # (z, A, gate state), 1-D float64 over the trained tokens -> (log w(r), log r w(r)), -inf where w = 0
    log_weights: Callable
    hard_clip: bool = False  # w is exactly 0 past a bound: clip_frac is defined
    levels: tuple[str, ...] = IMPORTANCE_SAMPLING_LEVELS  # where it is defined; the first is the default
    token_twin: str | None = None  # the kernel with the same gate on token ratios, when "token" is not in levels
    trl_loss_type: str | None = None  # GRPOConfig.loss_type averaging per response; None: TRL has no equivalent
    trl_token_pool_loss_type: str | None = None  # the same with one mean over all tokens (aggregation="token_pool")

    @property
    def default_level(self) -> str:
        return self.levels[0]

    def level_error(self, level: str | None) -> str | None:
        """Why ``level`` is not allowed for this kernel (one line), or None when it is (None = the default)."""
        if level is None or level in self.levels:
            return None
        twin = f"; its {level}-level twin is loss_type={self.token_twin!r}" if self.token_twin else ""
        return f"loss_type={self.name!r} is defined only at importance_sampling_level {self.levels}{twin}"


def _check_temperatures(tau_pos, tau_neg) -> None:
    check_temperature(tau_pos)
    check_temperature(tau_neg)


def _smooth_log_weights(log_gate: Callable) -> Callable:
    """A smooth kernel's (log w, log r w) from its log gate; r w never meets an overflowing r."""

    def log_weights(z, adv, tau):
        lg = log_gate(z, adv, tau)
        return lg, z + lg

    return log_weights


def _sapo_surrogate(z, adv, tau_pos, tau_neg):
    tau = token_temperatures(adv, tau_pos, tau_neg)
    return sapo_token_surrogate(z, tau), tau


def _directional_surrogate(z, adv, tau_pos, tau_neg):
    tau = token_temperatures(adv, tau_pos, tau_neg)
    return directional_token_surrogate(z, adv, tau), tau


def _gauss_surrogate(z, adv, tau_pos, tau_neg):
    tau = token_temperatures(adv, tau_pos, tau_neg)
    return gaussian_token_surrogate(z, tau), tau


def _clip_log_weights(z, adv, active):
    """Gate 1 where the clip passes the update, 0 past its bound (and for A = 0)."""
    log_gate = torch.where(active, torch.zeros_like(z), torch.full_like(z, float("-inf")))
    return log_gate, torch.where(active, z, torch.full_like(z, float("-inf")))


_CLIP = dict(reads=CLIP_EPSILONS, check=check_clip_eps, token_surrogate=clip_token_surrogate,
             log_weights=_clip_log_weights, hard_clip=True, trl_loss_type="grpo", trl_token_pool_loss_type="bnpo")
_SMOOTH = dict(reads=TEMPERATURES, check=_check_temperatures)

# The order is LOSS_TYPES's (public). The review's §14.2 ablation: grpo (directional hard clip),
# sapo_directional (directional smooth clip), sapo (bidirectional smooth), gauss (another smooth shape).
KERNELS: dict[str, Kernel] = {
    k.name: k
    for k in (
        Kernel("sapo", "SAPO's soft gate sech^2(tau (r - 1) / 2) on both sides of r = 1",
               token_surrogate=_sapo_surrogate, log_weights=_smooth_log_weights(
                   lambda z, adv, tau: log_gate_weight(torch.exp(z), tau)),
               trl_loss_type="sapo", **_SMOOTH),
        Kernel("grpo", "PPO's clip of the token ratio to [1 - eps_low, 1 + eps_high] on the side it cuts",
               **_CLIP),
        Kernel("gspo", "GRPO's clip on the sequence ratio (each response's geometric-mean ratio)",
               levels=("sequence",), token_twin="grpo", **_CLIP),
        Kernel("sapo_directional", "SAPO's gate on the side the clip would cut, no attenuation on the other",
               token_surrogate=_directional_surrogate,
               log_weights=_smooth_log_weights(log_directional_gate_from_log_ratio), **_SMOOTH),
        Kernel("gauss", "a Gaussian gate with SAPO's slope and half-width at r = 1, on both sides",
               token_surrogate=_gauss_surrogate,
               log_weights=_smooth_log_weights(lambda z, adv, tau: log_gaussian_gate_from_log_ratio(z, tau)),
               **_SMOOTH),
    )
}
LOSS_TYPES = tuple(KERNELS)


def kernel_for(loss_type: str) -> Kernel:
    """The registered kernel called ``loss_type``; ``ValueError`` naming the choices otherwise."""
    try:
        return KERNELS[loss_type]
    except (KeyError, TypeError):
        raise ValueError(f"loss_type must be one of {tuple(KERNELS)}, got {loss_type!r}") from None


def resolved_level(loss_type: str, level: str | None = None) -> str:
    """The importance-sampling level ``policy_loss`` uses: ``level``, or when None the kernel's default."""
    return kernel_for(loss_type).default_level if level is None else level


def token_level_kernel(loss_type: str) -> str:
    """The kernel to evaluate at token level for ``loss_type``: itself, or its token twin (gspo -> grpo)."""
    k = kernel_for(loss_type)
    return k.name if "token" in k.levels else k.token_twin
