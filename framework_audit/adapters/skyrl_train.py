"""skyrl-train 0.3.1: sapo_policy_loss, called as its policy worker calls it in training.

The worker (workers/worker.py, ppo_train and forward_backward) splits a mini-batch into micro-batches of
``trainer.micro_train_batch_size_per_gpu`` responses (1 in ppo_base_config.yaml), calls the loss on each and
divides it by the number of micro-batches before backward. The adapter does the same with the probe batch as
one mini-batch, with trainer.algorithm from the packaged ppo_base_config.yaml.
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "skyrl_train.utils.ppo_utils.sapo_policy_loss"

SETTINGS = (
    Setting("defaults", {"policy_loss_type": "sapo"},
            "ppo_base_config.yaml with policy_loss_type='sapo': loss_reduction='token_mean' (SAPO warns), one "
            "response per micro-batch", finding_level="training"),
    Setting("paper", {"policy_loss_type": "sapo", "loss_reduction": "sequence_mean",
                      "sapo": {"tau_pos": TAU_POS, "tau_neg": TAU_NEG}},
            "loss_reduction='sequence_mean', as the warning recommends", finding_level="training"),
)

SOURCES = (
    Source("skyrl_train/utils/ppo_utils.py", 598, 662,
           "fcfee4ff29980e8b6ba5ed93ee313167a805c2f51c7c49ceaa7742a31499b1ad",
           "sapo_policy_loss: log r clamped to [-20, 20], (4/tau) sigmoid gate, reduce_loss"),
    Source("skyrl_train/utils/ppo_utils.py", 881, 906,
           "fcfee4ff29980e8b6ba5ed93ee313167a805c2f51c7c49ceaa7742a31499b1ad",
           "reduce_loss: token_mean over the micro-batch's tokens, sequence_mean per response"),
    Source("skyrl_train/workers/worker.py", 625, 802,
           "4cd153636922245ff845a1a95babac0eb7349f0be289f66ebe66ccd139fd5528",
           "micro-batches of micro_train_batch_size_per_gpu, each loss / accumulation_steps"),
    Source("skyrl_train/config/ppo_base_config.yaml", 117, 190,
           "3ff4518b5032172195e79d01752e1a8907c5cb8797d86804d960e501bd7da565",
           "loss_reduction: token_mean; micro_train_batch_size_per_gpu: 1"),
)

# Read from those lines: with one response per micro-batch, token_mean is a per-response mean, and the +-20
# clamp changes a gradient by <= 2e-9: every check matches, in float64 and float32.
EXPECTED = {"defaults": [], "paper": []}
EXPECTED_FLOAT32 = {"defaults": [], "paper": []}


def load():
    from importlib.resources import files

    from loguru import logger
    from omegaconf import OmegaConf
    from skyrl_train.utils.ppo_utils import sapo_policy_loss

    logger.disable("skyrl_train")  # its token_mean warning, once per call, is a setting the card reports
    return sapo_policy_loss, OmegaConf.load(files("skyrl_train") / "config" / "ppo_base_config.yaml")


def make_loss(function, options):
    from omegaconf import OmegaConf

    sapo_policy_loss, base = function
    algorithm = OmegaConf.merge(base.trainer.algorithm, options)
    # validate_cfg (skyrl_train/utils/utils.py) adds this field before building the loss
    algorithm.max_seq_len = base.generator.max_input_length + base.generator.sampling_params.max_generate_length
    micro = int(base.trainer.micro_train_batch_size_per_gpu)

    def loss(logp, old_logp, advantages, mask):
        token_adv = advantages[:, None].expand_as(logp)  # skyrl's advantages are per token
        m = mask.to(logp.dtype)
        steps = max(logp.shape[0] // micro, 1)  # ppo_train's accumulation_steps for this mini-batch
        total = 0.0
        for i in range(0, logp.shape[0], micro):
            part = slice(i, i + micro)
            out, _ = sapo_policy_loss(logp[part], old_logp[part], token_adv[part], algorithm, loss_mask=m[part])
            total = total + out / steps
        return total

    return loss
