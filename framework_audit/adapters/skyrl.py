"""skyrl 0.4.0 (the renamed SkyRL): sapo_policy_loss, called as its trainer and policy worker call it.

The loss returns a masked sum; the aggregation is done before it: the trainer rescales each mini-batch's
advantages with ``apply_loss_reduction_to_advantages_minibatch`` (trainer.py, _normalize_advantages), and the
policy worker (workers/worker.py, forward_backward) calls the loss on micro-batches of
``micro_train_batch_size_per_gpu`` responses and backpropagates each one times the data-parallel size. The
adapter does both with skyrl's own functions, on one rank whose mini-batch is the probe batch, with skyrl's
AlgorithmConfig and TrainerConfig defaults. The KL term to the reference policy (``use_kl_loss``, default on,
coefficient 0.001) is a separate regulariser, not part of the SAPO loss, and is not audited.
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "skyrl.backends.skyrl_train.utils.ppo_utils.sapo_policy_loss"

SETTINGS = (
    Setting("defaults", {"policy_loss_type": "sapo"},
            "AlgorithmConfig defaults with policy_loss_type='sapo': loss_reduction='token_mean' (the loss warns "
            "that SAPO recommends 'sequence_mean'), one response per micro-batch", finding_level="training"),
    Setting("paper", {"policy_loss_type": "sapo", "loss_reduction": "sequence_mean",
                      "sapo": {"tau_pos": TAU_POS, "tau_neg": TAU_NEG}},
            "loss_reduction='sequence_mean', as the loss's warning recommends", finding_level="training"),
)

SOURCES = (
    Source("skyrl/backends/skyrl_train/utils/ppo_utils.py", 590, 660,
           "cb9d86f1ba8c6317ab567cbe4e456aa475e927501341641e3f57cd43a9bb947f",
           "sapo_policy_loss: log r clamped to [-20, 20], (4/tau) sigmoid gate, tau_pos where A > 0, reduce_loss"),
    Source("skyrl/backends/skyrl_train/utils/ppo_utils.py", 1145, 1220,
           "cb9d86f1ba8c6317ab567cbe4e456aa475e927501341641e3f57cd43a9bb947f",
           "reduce_loss: the masked sum; apply_loss_reduction_to_advantages_minibatch: token_mean divides the "
           "advantages by the mini-batch's token count, sequence_mean by (responses x each response's length)"),
    Source("skyrl/train/trainer.py", 1497, 1537,
           "8b6e245fcd8f5b1f2a25c4b8674ece2983cd6b61a5784f026ad71aabcd303d97",
           "_normalize_advantages: the advantages of each mini-batch rescaled before the workers run"),
    Source("skyrl/backends/skyrl_train/workers/worker.py", 984, 1244,
           "714d70b57f2090baf4e54f76e08ab3b1249a1d732cc9382e82993a8092417577",
           "forward_backward: micro-batches, each policy loss x dp_size before backward (line 1244)"),
    Source("skyrl/train/config/config.py", 783, 1020,
           "09debede92a39d1ea9945dd4a90a32823a6ae496c5fcdbd1b8ccca523f37f4db",
           "SAPOConfig tau_pos=1.0, tau_neg=1.05; AlgorithmConfig loss_reduction='token_mean'"),
)

# Read from those lines: the gate is the paper's and the +-20 clamp changes a gradient by <= 2e-9 (float32
# stays finite); token_mean weighs every token by 1 / the mini-batch's token count (a token pool).
EXPECTED = {"defaults": ["aggregation"], "paper": []}
EXPECTED_FLOAT32 = dict(EXPECTED)


def load():
    from loguru import logger
    from skyrl.backends.skyrl_train.utils.ppo_utils import (
        apply_loss_reduction_to_advantages_minibatch,
        sapo_policy_loss,
    )
    from skyrl.train.config import AlgorithmConfig, TrainerConfig

    logger.disable("skyrl")  # its token_mean warning, once per call, is a setting the card reports
    return sapo_policy_loss, apply_loss_reduction_to_advantages_minibatch, AlgorithmConfig, TrainerConfig


def make_loss(function, options):
    from omegaconf import OmegaConf

    sapo_policy_loss, scale_advantages, algorithm_config, trainer_config = function
    algorithm = algorithm_config.from_dict_config(OmegaConf.create(options))
    micro = trainer_config.__dataclass_fields__["micro_train_batch_size_per_gpu"].default
    dp_size = 1

    def loss(logp, old_logp, advantages, mask):
        m = mask.to(logp.dtype)
        token_adv = advantages[:, None].expand_as(logp)  # skyrl's advantages are per token
        # the trainer's per-mini-batch rescaling, before the workers run
        scaled = scale_advantages(advantages=token_adv, loss_mask=m, loss_reduction=algorithm.loss_reduction,
                                  micro_batch_size=micro, max_seq_len=algorithm.max_seq_len)
        total = 0.0
        for i in range(0, logp.shape[0], micro):
            part = slice(i, i + micro)
            out, _ = sapo_policy_loss(logp[part], old_logp[part], scaled[part], config=algorithm, loss_mask=m[part])
            total = total + out * dp_size
        return total

    return loss
