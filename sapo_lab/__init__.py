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

# The training stack imports transformers, which is slow to load; the loss library does not
# need it, so these names are resolved on first use (PEP 562). The sampling function stays
# sapo_lab.rollout.rollout: the name sapo_lab.rollout is the submodule.
_LAZY = {
    "TrainConfig": "config", "load_config": "config",
    "evaluate": "evaluation", "pass_at_k": "evaluation",
    "build_model": "model", "load_model_and_tokenizer": "model", "response_logprobs": "model",
    "Episode": "rollout", "MiniBatch": "rollout", "RolloutBatch": "rollout",
    "make_splits": "task", "verify": "task",
    "build_char_tokenizer": "tokenizer",
    "train": "trainer",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sapo_lab' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "Episode",
    "MiniBatch",
    "RolloutBatch",
    "TrainConfig",
    "build_char_tokenizer",
    "build_model",
    "evaluate",
    "load_config",
    "load_model_and_tokenizer",
    "make_splits",
    "pass_at_k",
    "response_logprobs",
    "train",
    "verify",
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
