"""ms-swift 3.12.2: GRPOTrainer._compute_loss_and_metrics with loss_type="sapo" (the HF-trainer path).

As for ms-swift 4.6.0 (ms_swift4.py): the method is called unbound on an object holding
GRPOArgumentsMixin's defaults for the SAPO options, with the trainer's other features switched off.
"""

from types import SimpleNamespace

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting

FUNCTION = "swift.trainers.rlhf_trainer.grpo_trainer.GRPOTrainer._compute_loss_and_metrics"

SETTINGS = (
    Setting("defaults", {}, "GRPOArgumentsMixin defaults with loss_type='sapo': importance_sampling_level='token'"),
    Setting("paper", {"importance_sampling_level": "token", "tau_pos": TAU_POS, "tau_neg": TAU_NEG},
            "the defaults already are the paper's setting (no option adds the 4/tau factor)"),
    Setting("sequence", {"importance_sampling_level": "sequence"}, "GSPO's sequence ratio", level="sequence"),
)


def load():
    from swift.trainers.arguments import GRPOArgumentsMixin
    from swift.trainers.rlhf_trainer.grpo_trainer import GRPOTrainer

    return GRPOTrainer._compute_loss_and_metrics, GRPOArgumentsMixin


def make_loss(function, options):
    compute, arguments = function
    defaults = {k: arguments.__dataclass_fields__[k].default
                for k in ("importance_sampling_level", "tau_pos", "tau_neg", "off_policy_sequence_mask_delta")}
    trainer = SimpleNamespace(**{**defaults, **options}, loss_type="sapo", model=SimpleNamespace(training=True),
                              compute_entropy=False, overlong_filter=False, beta=0.0, kl_in_reward=False,
                              rollout_importance_sampling_mode=None, log_rollout_offpolicy_metrics=False,
                              disable_rollout_importance_sampling=True, chord_sft_iterator=None)

    def loss(logp, old_logp, advantages, mask):
        trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (logp, None)
        inputs = {"completion_mask": mask, "truncated_mask": mask.new_zeros(mask.shape[0]),
                  "old_per_token_logps": old_logp, "advantages": advantages}  # one advantage per response in 3.x
        return compute(trainer, None, inputs)[0]

    return loss
