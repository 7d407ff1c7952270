"""Axolotl 0.21.0: AsyncGRPOTrainer._compute_loss with loss_type="sapo", on a real trainer.

Axolotl's async GRPO trainer subclasses TRL's GRPOTrainer and overrides ``_compute_loss`` with its own copy of
TRL's loss. As for TRL (trl.py): the trainer holds a tiny GPT-2 (sapo_lab's cpu-micro preset) that the loss
never runs, its log-prob method is replaced by one returning the audit's log-probs, and the loss is the
trainer's own method, called as its training step calls it on one micro-batch. The temperatures come from
torch.where on Python floats, so they are held in torch's default dtype (float32).
"""

import os

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source
from framework_audit.adapters.trl import trainer_loss

FUNCTION = "axolotl.core.trainers.grpo.async_trainer.AsyncGRPOTrainer._compute_loss"

SETTINGS = (
    Setting("defaults", {"loss_type": "sapo"},
            "AsyncGRPOConfig defaults with loss_type='sapo' (synchronous rollouts, async_prefetch=False)",
            finding_level="training"),
    Setting("paper", {"loss_type": "sapo", "importance_sampling_level": "token",
                      "sapo_temperature_pos": TAU_POS, "sapo_temperature_neg": TAU_NEG},
            "the defaults already are the paper's setting", finding_level="training"),
    Setting("sequence", {"loss_type": "sapo", "importance_sampling_level": "sequence"},
            "GSPO's sequence ratio", level="sequence", finding_level="training"),
)

SOURCES = (
    Source("axolotl/core/trainers/grpo/async_trainer.py", 3101, 3349,
           "a744b5c3868141a041099b82577ecd0413509d07fc824c19676b4d7c5eec3112",
           "_compute_loss: r = exp(log r) unclamped (line 3218), (4/tau) sigmoid gate with tau from torch.where "
           "on Python floats (lines 3242-3249), per-sequence mean / accumulation steps for 'sapo' (lines "
           "3276-3279)"),
)

# Read from those lines: TRL's SAPO branch, line for line (tau held in float32); in float32 exp(log r)
# overflows above log r = 88.72 (NaN).
EXPECTED = {"defaults": [], "paper": [], "sequence": []}
EXPECTED_FLOAT32 = {k: ["extreme log-ratios"] for k in EXPECTED}


def load():
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # axolotl imports trl.experimental
    from axolotl.core.trainers.grpo.async_trainer import AsyncGRPOConfig, AsyncGRPOTrainer
    from datasets import Dataset

    return AsyncGRPOTrainer, AsyncGRPOConfig, Dataset


def make_loss(function, options):
    # AsyncGRPOTrainer subclasses TRL's GRPOTrainer: built and called exactly as TRL's adapter does it
    return trainer_loss(function, options, "axolotl")
