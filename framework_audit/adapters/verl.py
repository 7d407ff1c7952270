"""verl 0.9.1: compute_policy_loss_sapo, called as verl's actor calls it (workers/utils/losses.py, ppo_loss).

ppo_loss fills ``config.global_batch_info`` before every call: the data-parallel size, the mini-batch's token
count and its number of responses (``global_batch_size``, ppo_mini_batch_size x rollout.n, set by the
trainer). The adapter does the same for one rank whose mini-batch is the probe batch, so the findings hold
for training. compute_policy_loss_sapo aggregates with "seq-mean-token-mean" whatever loss_agg_mode says.
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "verl.trainer.ppo.core_algos.compute_policy_loss_sapo"

SETTINGS = (
    # ActorConfig's default loss_agg_mode is "token-mean"; the actor passes it to every policy loss.
    Setting("defaults", {}, "FSDPActorConfig defaults: loss_agg_mode='token-mean' (not read by the SAPO loss), "
            "tau_pos=1.0, tau_neg=1.05", finding_level="training"),
    Setting("paper", {"loss_agg_mode": "seq-mean-token-mean", "tau_pos": TAU_POS, "tau_neg": TAU_NEG},
            "per-response mean of token losses (the mode verl's docstring recommends for SAPO)",
            finding_level="training"),
)

SOURCES = (
    Source("verl/trainer/ppo/core_algos.py", 1623, 1704,
           "a54b6d812db4441e8b0989ae69d2c46b0a0a7b584296f73d8316f264462c37cb",
           "compute_policy_loss_sapo: log r clamped to [-20, 20], (4/tau) sigmoid gate, seq-mean-token-mean"),
    Source("verl/trainer/ppo/core_algos.py", 1140, 1206,
           "a54b6d812db4441e8b0989ae69d2c46b0a0a7b584296f73d8316f264462c37cb",
           "agg_loss: the sum of per-response means / global_batch_size (empty responses counted)"),
    Source("verl/workers/utils/losses.py", 57, 144,
           "c6dfeb10900054e96b432633b975f3e3a535d3358a4ad13eeda9f730c5942d4a",
           "ppo_loss fills global_batch_info, then calls the policy loss"),
)

# Read from those lines: every check matches in float64 (the +-20 clamp changes a gradient by <= 2e-9).
EXPECTED = {"defaults": [], "paper": []}
EXPECTED_FLOAT32 = {"defaults": [], "paper": []}  # the clamp keeps float32 finite


def load():
    from verl.trainer.ppo.core_algos import compute_policy_loss_sapo
    from verl.workers.config import FSDPActorConfig

    return compute_policy_loss_sapo, FSDPActorConfig


def make_loss(function, options):
    compute_policy_loss_sapo, actor_config = function
    # rollout_n and a micro-batch size are required fields that the loss does not read
    config = actor_config(rollout_n=1, ppo_micro_batch_size_per_gpu=1, **options)

    def loss(logp, old_logp, advantages, mask):
        config.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()),
                                        global_batch_size=mask.shape[0], loss_scale_factor=config.loss_scale_factor)
        token_adv = advantages[:, None].expand_as(logp)  # verl's advantages are per token
        out, _ = compute_policy_loss_sapo(old_log_prob=old_logp, log_prob=logp, advantages=token_adv,
                                          response_mask=mask, loss_agg_mode=config.loss_agg_mode, config=config)
        return out

    return loss
