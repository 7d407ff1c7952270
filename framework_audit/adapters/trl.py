"""TRL 1.16.0: GRPOTrainer._compute_loss with loss_type="sapo", on a real trainer.

The trainer holds a tiny GPT-2 (sapo_lab's cpu-micro preset) that the loss never runs: its log-prob
method is replaced by one returning the audit's log-probs, as in tests/integrations/test_trl_equivalence.py. The loss is
the trainer's own method, called as its training step calls it on one micro-batch. TRL builds the
temperatures with torch.where on Python floats, so they are held in torch's default dtype (float32): the
float64 audit recognises tau held in float32 and says so.
"""

import tempfile

import torch

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "trl.GRPOTrainer._compute_loss"

SETTINGS = (
    Setting("defaults", {"loss_type": "sapo"},
            "GRPOConfig defaults with loss_type='sapo' (the default loss_type is 'dapo')", finding_level="training"),
    Setting("paper", {"loss_type": "sapo", "importance_sampling_level": "token",
                      "sapo_temperature_pos": TAU_POS, "sapo_temperature_neg": TAU_NEG},
            "the defaults already are the paper's setting", finding_level="training"),
    Setting("sequence", {"loss_type": "sapo", "importance_sampling_level": "sequence"},
            "GSPO's sequence ratio", level="sequence", finding_level="training"),
)

SOURCES = (
    Source("trl/trainer/grpo_trainer.py", 3020, 3290,
           "1c3dc2253fb3653269c11dfce4f946f74201a4cb63e0887a37e8e3bb4a3f5503",
           "_compute_loss: r = exp(log r) unclamped (line 3095), (4/tau) sigmoid gate with tau from torch.where "
           "on Python floats (lines 3121-3124), per-sequence mean for 'sapo'"),
)

# Read from those lines: the paper's objective (tau held in float32); in float32 exp(log r) overflows above
# log r = 88.72 (NaN).
EXPECTED = {"defaults": [], "paper": [], "sequence": []}
EXPECTED_FLOAT32 = {k: ["extreme log-ratios"] for k in EXPECTED}


def load():
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    return GRPOTrainer, GRPOConfig, Dataset


def make_loss(function, options):
    return trainer_loss(function, options, "trl")


def trainer_loss(function, options, name: str):
    """The loss of a GRPOTrainer (or a subclass, such as Axolotl's) built on a tiny model, called as its
    training step calls ``_compute_loss``; ``name`` labels the trainer's temporary output folder."""
    from sapo_lab import build_char_tokenizer, build_model

    trainer_class, config_class, dataset_class = function
    output = tempfile.TemporaryDirectory(prefix=f"conformance-{name}-")  # removed with the loss function
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
