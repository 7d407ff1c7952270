"""SAPO Lab: Soft Adaptive Policy Optimization, implemented to be checked.

The loss library (gates, clip, advantages, masks, losses, audit) is pure torch;
the training stack (model, task, rollout, trainer, cli) builds on it.
"""

from .advantages import group_advantages
from .audit import AuditTable, gradient_audit
from .clip import clip_is_active, ppo_clip_derivative, ppo_clip_surrogate
from .gates import (
    centered_soft_gate,
    gate_weight,
    log_gate_weight,
    log_update_coefficient_from_log_ratio,
    soft_gate,
    update_coefficient,
)
from .losses import LOSS_TYPES, PolicyLossOutput, policy_loss, sapo_token_surrogate
from .masks import aggregation_weights, mask_from_lengths, masked_mean, response_lengths

__version__ = "0.1.0"

__all__ = [
    "AuditTable",
    "LOSS_TYPES",
    "PolicyLossOutput",
    "aggregation_weights",
    "centered_soft_gate",
    "clip_is_active",
    "gate_weight",
    "gradient_audit",
    "group_advantages",
    "log_gate_weight",
    "log_update_coefficient_from_log_ratio",
    "mask_from_lengths",
    "masked_mean",
    "policy_loss",
    "ppo_clip_derivative",
    "ppo_clip_surrogate",
    "response_lengths",
    "sapo_token_surrogate",
    "soft_gate",
    "update_coefficient",
]
