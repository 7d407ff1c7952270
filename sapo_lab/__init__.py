"""SAPO Lab: Soft Adaptive Policy Optimization, implemented to be checked.

Layers, lowest first (``sapo_lab.layers`` states which may import which):
``objective`` (the loss library, pure torch), ``tasks`` (prompts and verifiers),
``runs`` (what a run and a study leave on disk: config, folders, checkpoints),
``training`` (model, rollouts, the trainer), ``studies`` (declared experiments and
their paired analysis), ``integrations`` (TRL), ``conformance`` (auditing other
frameworks' SAPO), ``viz`` (the book's figures) and ``cli`` on top.
"""

from ._lazy import lazy_names
from ._version import __version__

# Every name is resolved on first use (PEP 562): the loss library imports torch and the
# training stack transformers, and neither is needed to answer ``python -m sapo_lab --help``
# or to read tasks and studies. The sampling function stays sapo_lab.training.rollout.rollout.
_LAZY = {
    "group_advantages": "objective.advantages",
    "AuditTable": "objective.audit", "gradient_audit": "objective.audit",
    "clip_is_active": "objective.clip", "ppo_clip_derivative": "objective.clip", "ppo_clip_surrogate": "objective.clip",
    "centered_soft_gate": "objective.gates", "gate_weight": "objective.gates", "log_gate_weight": "objective.gates",
    "log_update_coefficient_from_log_ratio": "objective.gates", "sapo_token_surrogate": "objective.gates",
    "soft_gate": "objective.gates", "update_coefficient": "objective.gates",
    "LOSS_TYPES": "objective.losses", "PolicyLossOutput": "objective.losses", "policy_loss": "objective.losses",
    "aggregation_weights": "objective.masks", "mask_from_lengths": "objective.masks", "masked_mean": "objective.masks",
    "response_lengths": "objective.masks",
    "TrainConfig": "runs.config", "load_config": "runs.config",
    "evaluate": "training.evaluation", "pass_at_k": "training.evaluation",
    "build_model": "training.model", "load_model_and_tokenizer": "training.model",
    "response_logprobs": "training.model",
    "Episode": "training.rollout", "MiniBatch": "training.rollout", "RolloutBatch": "training.rollout",
    "make_splits": "tasks", "verify": "tasks",
    "build_char_tokenizer": "training.tokenizer",
    "train": "training.trainer",
}


__getattr__ = lazy_names(__name__, globals(), _LAZY)



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
