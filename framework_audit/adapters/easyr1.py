"""EasyR1 (commit b44b311): compute_policy_loss with loss_type="sapo", called as its actor's update calls it.

EasyR1's DataParallelPPOActor.update_policy (verl/workers/actor/dp_actor.py) counts the mini-batch's response
tokens over all ranks, splits the mini-batch into micro-batches of ``micro_batch_size_per_device_for_update``
responses, calls compute_policy_loss on each with the actor config's fields, and multiplies each micro-batch's
loss by its share of the mini-batch's tokens before backward. The adapter does the same on one rank whose
mini-batch is the probe batch, with EasyR1's own ActorConfig; the loop and the token-share factor are the
trainer's (it imports the model stack, so it is not called), the loss is EasyR1's function.
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "verl.trainer.core_algos.compute_policy_loss"

SETTINGS = (
    Setting("defaults", {"loss_type": "sapo"},
            "ActorConfig defaults with loss_type='sapo' (its SAPO example sets only that): loss_avg_mode='token', "
            "micro-batches of 4 regrouped by dynamic batching, which in 'token' mode changes nothing (each "
            "micro-batch's token mean times its token share is its token sum over the mini-batch's tokens)",
            finding_level="training"),
    Setting("paper", {"loss_type": "sapo", "loss_avg_mode": "seq", "dynamic_batching": False,
                      "tau_positive": TAU_POS, "tau_negative": TAU_NEG},
            "loss_avg_mode='seq' with one micro-batch holding the whole mini-batch (the probe's at most 4 "
            "responses fit the default micro-batch of 4): only then is the token-share factor 1",
            finding_level="training"),
    Setting("seq_small_micro_batches", {"loss_type": "sapo", "loss_avg_mode": "seq", "dynamic_batching": False,
                                        "micro_batch_size_per_device_for_update": 1},
            "loss_avg_mode='seq' with micro-batches smaller than the mini-batch (here 1 response): each "
            "micro-batch's per-response mean is weighted by its token share", finding_level="training"),
)

SOURCES = (
    Source("verl/trainer/core_algos.py", 383, 509,
           "871cadc71a8b04295ebdc8ff516ba242697e49cb27680920d4870a8431023d71",
           "average_loss ('token': masked mean, 'seq': per-response means averaged) and compute_policy_loss: log r "
           "clamped to [-20, 20] (line 478), (4/tau) sigmoid gate, tau_positive where A >= 0 (lines 490-495)"),
    Source("verl/workers/actor/dp_actor.py", 219, 297,
           "2e7ba59831f4a8c0d01e918103f191554cb1bb70df7ee95efddc31c36bd6ded0",
           "update_policy: the mini-batch's tokens over all ranks (lines 237-238), micro-batches (line 245), "
           "each loss x its micro-batch's tokens x world size / the mini-batch's tokens (line 287)"),
    Source("verl/workers/actor/config.py", 97, 140,
           "f95864cb05d3219296071ff13423a623c0261270e71b94c755ddd5814dafa926",
           "ActorConfig: loss_avg_mode='token', micro_batch_size_per_device_for_update=4, dynamic_batching=True, "
           "tau_positive=1.0, tau_negative=1.05"),
)

# Read from those lines: the gate is the paper's and the +-20 clamp changes a gradient by <= 2e-9 (float32
# stays finite). 'token' mode, and 'seq' mode over micro-batches smaller than the mini-batch, weigh each token
# by 1 / the mini-batch's token count (a token pool); a mini-batch without tokens divides 0 by 0 (line 287).
_POOL = ["aggregation", "batch without tokens"]
EXPECTED = {"defaults": _POOL, "paper": ["batch without tokens"], "seq_small_micro_batches": _POOL}
EXPECTED_FLOAT32 = dict(EXPECTED)


def load():
    from verl.trainer.core_algos import compute_policy_loss
    from verl.workers.actor.config import ActorConfig

    return compute_policy_loss, ActorConfig


def make_loss(function, options):
    compute_policy_loss, actor_config = function
    config = actor_config(**options)
    world_size = 1

    def loss(logp, old_logp, advantages, mask):
        response_mask = mask.long()  # the actor's response_mask is the attention mask's response part
        token_adv = advantages[:, None].expand_as(logp)  # EasyR1's advantages are per token
        total_response_tokens = response_mask.sum()  # all-reduced over ranks: one rank here
        micro = config.micro_batch_size_per_device_for_update
        total = 0.0
        for i in range(0, logp.shape[0], micro):
            part = slice(i, i + micro)
            pg_loss, _ = compute_policy_loss(
                old_log_probs=old_logp[part], log_probs=logp[part], advantages=token_adv[part],
                response_mask=response_mask[part], clip_ratio_low=config.clip_ratio_low,
                clip_ratio_high=config.clip_ratio_high, clip_ratio_dual=config.clip_ratio_dual,
                tau_positive=config.tau_positive, tau_negative=config.tau_negative, loss_type=config.loss_type,
                loss_avg_mode=config.loss_avg_mode)
            total = total + pg_loss * response_mask[part].sum() * world_size / total_response_tokens
        return total

    return loss
