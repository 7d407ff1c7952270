"""Axolotl 0.21.0: AsyncGRPOTrainer._compute_loss with loss_type="sapo", on a real trainer.

Axolotl's async GRPO trainer subclasses TRL's GRPOTrainer and overrides ``_compute_loss`` with its own copy of
TRL's loss. As for TRL (trl.py): the trainer holds a tiny GPT-2 (sapo_lab's cpu-micro preset) that the loss
never runs, its log-prob method is replaced by one returning the audit's log-probs, and the loss is the
trainer's own method, called as its training step calls it on one micro-batch. The temperatures come from
torch.where on Python floats, so they are held in torch's default dtype (float32).
"""

import os
import tempfile

import torch

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

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
    from sapo_lab import build_char_tokenizer, build_model

    trainer_class, config_class, dataset_class = function
    output = tempfile.TemporaryDirectory(prefix="conformance-axolotl-")  # removed with the loss function
    args = config_class(output_dir=output.name, use_cpu=True, bf16=False,
                        report_to="none", per_device_train_batch_size=4, num_generations=4, **options)
    trainer = trainer_class(model=build_model("cpu-micro", seed=0), args=args, processing_class=build_char_tokenizer(),
                            reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                            train_dataset=dataset_class.from_dict({"prompt": ["1+1="] * 4}))
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train()
    trainer.model.train()

    def loss(logp, old_logp, advantages, mask):
        assert output  # the trainer's output folder lives as long as this function
        trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros_like(logp.detach()), None)
        ids = torch.zeros(mask.shape, dtype=torch.long)
        inputs = {"prompt_ids": ids[:, :1], "prompt_mask": torch.ones_like(ids[:, :1]), "completion_ids": ids,
                  "completion_mask": mask.long(), "advantages": advantages, "old_per_token_logps": old_logp}
        return trainer._compute_loss(trainer.model, inputs)

    return loss
