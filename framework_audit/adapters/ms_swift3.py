"""ms-swift 3.12.2: GRPOTrainer._compute_loss_and_metrics with loss_type="sapo" (the HF-trainer path).

As for ms-swift 4.6.0 (ms_swift4.py): the method is called unbound on an object holding
GRPOArgumentsMixin's defaults for the SAPO options, with the trainer's other features switched off (the
trainer's loss method as its training step calls it on one micro-batch). With ``use_liger_kernel`` the
trainer uses Liger's loss instead (see the "liger" setting).
"""

from types import SimpleNamespace

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "swift.trainers.rlhf_trainer.grpo_trainer.GRPOTrainer._compute_loss_and_metrics"

SETTINGS = (
    Setting("defaults", {}, "GRPOArgumentsMixin defaults with loss_type='sapo': importance_sampling_level='token'",
            finding_level="training"),
    Setting("paper", {"importance_sampling_level": "token", "tau_pos": TAU_POS, "tau_neg": TAU_NEG},
            "the defaults already are the paper's setting (no option adds the 4/tau factor)", finding_level="training"),
    Setting("sequence", {"importance_sampling_level": "sequence"}, "GSPO's sequence ratio", level="sequence",
            finding_level="training"),
    Setting("liger", None,
            "use_liger_kernel=true: _prepare_liger_loss builds Liger's LigerFusedLinearGRPOLoss(loss_type='sapo') "
            "without the temperatures, so training gets Liger's SAPO (4/tau included: the liger-kernel rows) with "
            "Liger's defaults tau_pos=1, tau_neg=1.05, and --tau_pos/--tau_neg are silently ignored; read from the "
            "source (Liger is not installed in this environment), not audited"),
    Setting("megatron", None,
            "the Megatron trainer (swift/megatron/trainers/grpo_trainer.py) has the same gate sigmoid(tau (r - 1)) "
            "without 4/tau and the same per-response mean, so the same tau/4 on-policy factor; read from the "
            "source, not audited: its module imports megatron.training (Megatron-LM, on no package index; the "
            "megatron-core wheel holds megatron.core only) and vLLM at import"),
)

SOURCES = (
    Source("swift/trainers/rlhf_trainer/grpo_trainer.py", 1073, 1296,
           "164ac99abb56c30586507624418f17991cb9179e8953f03e824ceb2b098b8345",
           "_compute_loss_and_metrics: gate sigmoid(tau (r - 1)) without 4/tau (lines 1186-1193)"),
    Source("swift/trainers/rlhf_trainer/grpo_trainer.py", 2078, 2095,
           "164ac99abb56c30586507624418f17991cb9179e8953f03e824ceb2b098b8345",
           "_prepare_liger_loss: LigerFusedLinearGRPOLoss built without tau_pos / tau_neg"),
    Source("swift/megatron/trainers/grpo_trainer.py", 1245, 1250,
           "6d47726fa6e6671b76aa0034c9b621f7c940f256b1872c4220a0314ca61d7162",
           "the Megatron trainer's SAPO gate: sigmoid(tau (r - 1)) without 4/tau"),
    Source("swift/megatron/trainers/grpo_trainer.py", 1315, 1317,
           "6d47726fa6e6671b76aa0034c9b621f7c940f256b1872c4220a0314ca61d7162",
           "the Megatron trainer's per-response mean for sapo"),
)

# Read from those lines: the gate lacks 4/tau, so the gradient is tau/4 of the paper's (on-policy factor and
# closed form differ); in float32 exp(log r) also overflows above log r = 88.72.
_SCALE = ["on-policy gradient (r = 1)", "per-token gradient (autograd)"]
EXPECTED = {"defaults": _SCALE, "paper": _SCALE, "sequence": _SCALE}
EXPECTED_FLOAT32 = {k: [*v, "extreme log-ratios"] for k, v in EXPECTED.items()}


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
