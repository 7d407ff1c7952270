"""SAPO Lab: Soft Adaptive Policy Optimization, implemented to be checked.

Layers, lowest first (``sapo_lab.layers`` states which may import which):
``objective`` (the loss library, pure torch), ``tasks`` (prompts and verifiers),
``training`` (model, rollouts, the trainer), ``studies`` (declared experiments and
their paired analysis), ``integrations`` (TRL), ``conformance`` (auditing other
frameworks' SAPO), ``viz`` (the book's figures) and ``cli`` on top.
"""

from ._version import __version__
from .objective.advantages import group_advantages
from .objective.audit import AuditTable, gradient_audit
from .objective.clip import clip_is_active, ppo_clip_derivative, ppo_clip_surrogate
from .objective.gates import (
    centered_soft_gate,
    gate_weight,
    log_gate_weight,
    log_update_coefficient_from_log_ratio,
    sapo_token_surrogate,
    soft_gate,
    update_coefficient,
)
from .objective.losses import LOSS_TYPES, PolicyLossOutput, policy_loss
from .objective.masks import aggregation_weights, mask_from_lengths, masked_mean, response_lengths

# The training stack imports transformers, which is slow to load; the loss library does not
# need it, so these names are resolved on first use (PEP 562). The sampling function stays
# sapo_lab.training.rollout.rollout.
_LAZY = {
    "TrainConfig": "training.config", "load_config": "training.config",
    "evaluate": "training.evaluation", "pass_at_k": "training.evaluation",
    "build_model": "training.model", "load_model_and_tokenizer": "training.model",
    "response_logprobs": "training.model",
    "Episode": "training.rollout", "MiniBatch": "training.rollout", "RolloutBatch": "training.rollout",
    "make_splits": "tasks", "verify": "tasks",
    "build_char_tokenizer": "training.tokenizer",
    "train": "training.trainer",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sapo_lab' has no attribute {name!r}")



__all__ = [
    "__version__",
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
