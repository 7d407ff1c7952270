"""ms-swift 4.6.0: GRPOTrainer._compute_loss_and_metrics with loss_type="sapo" (the HF-trainer path).

The method reads its settings from the trainer; the adapter calls it unbound on an object that holds
GRPOArgumentsMixin's defaults for the SAPO options and switches the other features off (KL to a
reference, entropy masking, rollout importance sampling, overlong filter, auxiliary losses): the trainer's
own loss method, as its training step calls it on one micro-batch.
The Megatron trainer's SAPO branch (swift/megatron/trainers/grpo_trainer.py) is read from the source, not
audited (the "megatron" setting says why).
"""

from types import SimpleNamespace

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "swift.rlhf_trainers.grpo_trainer.GRPOTrainer._compute_loss_and_metrics"

SETTINGS = (
    Setting("defaults", {}, "GRPOArgumentsMixin defaults with loss_type='sapo': importance_sampling_level='token'",
            finding_level="training"),
    Setting("paper", {"importance_sampling_level": "token", "tau_pos": TAU_POS, "tau_neg": TAU_NEG},
            "the defaults already are the paper's setting", finding_level="training"),
    Setting("sequence", {"importance_sampling_level": "sequence"}, "GSPO's sequence ratio", level="sequence",
            finding_level="training"),
    Setting("megatron", None,
            "the Megatron trainer (swift/megatron/trainers/grpo_trainer.py) has the same (4/tau) sigmoid gate and "
            "per-response mean as the HF path; read from the source, not audited: its module imports mcore_bridge, "
            "which imports transformer_engine at import, whose PyTorch part (transformer_engine_torch 2.20.2) is a "
            "source distribution compiled against a CUDA build of torch (the audit's torch is the CPU build), "
            "beside the 729 MB transformer_engine_cu12 wheel"),
)

SOURCES = (
    Source("swift/rlhf_trainers/grpo_trainer.py", 934, 1226,
           "53fddb594ce9a996da34b285984ce4fa3d8709fee4164cc88e98f1223732da2f",
           "_compute_loss_and_metrics: (4/tau) sigmoid gate (line 1040), r = exp(log r) unclamped"),
    Source("swift/megatron/trainers/grpo_trainer.py", 1047, 1052,
           "34ec4b21ec0e33b2920d1b3712e86abccf594f08cce055417ec723ea7b38378b",
           "the Megatron trainer's SAPO gate: (4/tau) sigmoid(tau (r - 1))"),
    Source("swift/megatron/trainers/grpo_trainer.py", 1127, 1129,
           "34ec4b21ec0e33b2920d1b3712e86abccf594f08cce055417ec723ea7b38378b",
           "the Megatron trainer's per-response mean for sapo"),
)

# Read from those lines: the paper's objective; in float32 exp(log r) overflows above log r = 88.72 (NaN).
EXPECTED = {"defaults": [], "paper": [], "sequence": []}
EXPECTED_FLOAT32 = {k: ["extreme log-ratios"] for k in EXPECTED}


def load():
    from swift.rl_core.data import GRPOBatch
    from swift.rlhf_trainers.args_mixin import GRPOArgumentsMixin
    from swift.rlhf_trainers.grpo_trainer import GRPOTrainer

    return GRPOTrainer._compute_loss_and_metrics, GRPOBatch, GRPOArgumentsMixin


def make_loss(function, options):
    compute, batch_class, arguments = function
    defaults = {k: arguments.__dataclass_fields__[k].default
                for k in ("importance_sampling_level", "tau_pos", "tau_neg", "off_policy_sequence_mask_delta")}
    trainer = SimpleNamespace(**{**defaults, **options}, loss_type="sapo", model=SimpleNamespace(training=True),
                              compute_entropy=False, overlong_filter=False, beta=0.0, kl_in_reward=False,
                              rollout_importance_sampling_mode=None, log_rollout_offpolicy_metrics=False,
                              disable_rollout_importance_sampling=True, _has_teacher=False, sdar_loss_coef=0.0,
                              chord_sft_iterator=None)

    def loss(logp, old_logp, advantages, mask):
        trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (logp, None)
        batch = batch_class(completion_mask=mask, truncated_mask=mask.new_zeros(mask.shape[0]),
                            seq_lengths=mask.sum(-1), old_per_token_logps=old_logp,
                            advantages=advantages[:, None].expand_as(logp))  # per token in 4.x
        return compute(trainer, None, {}, batch)[0]

    return loss
