"""verl 0.9.1: compute_policy_loss_sapo, called as verl's actor calls it (workers/utils/losses.py)."""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting

FUNCTION = "verl.trainer.ppo.core_algos.compute_policy_loss_sapo"

SETTINGS = (
    # ActorConfig's default loss_agg_mode is "token-mean"; the actor passes it to every policy loss.
    Setting("defaults", {}, "FSDPActorConfig defaults: loss_agg_mode='token-mean', tau_pos=1.0, tau_neg=1.05"),
    Setting("paper", {"loss_agg_mode": "seq-mean-token-mean", "tau_pos": TAU_POS, "tau_neg": TAU_NEG},
            "per-response mean of token losses (the mode verl's docstring recommends for SAPO)"),
)


def load():
    from verl.trainer.ppo.core_algos import compute_policy_loss_sapo
    from verl.workers.config import FSDPActorConfig

    return compute_policy_loss_sapo, FSDPActorConfig


def make_loss(function, options):
    compute_policy_loss_sapo, actor_config = function
    # rollout_n and a micro-batch size are required fields that the loss does not read
    config = actor_config(rollout_n=1, ppo_micro_batch_size_per_gpu=1, **options)

    def loss(logp, old_logp, advantages, mask):
        token_adv = advantages[:, None].expand_as(logp)  # verl's advantages are per token
        out, _ = compute_policy_loss_sapo(old_log_prob=old_logp, log_prob=logp, advantages=token_adv,
                                          response_mask=mask, loss_agg_mode=config.loss_agg_mode, config=config)
        return out

    return loss
