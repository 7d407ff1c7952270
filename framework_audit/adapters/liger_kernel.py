"""Liger-Kernel 0.8.5: the GRPO loss of its chunked fused-linear module, with loss_type="sapo".

LigerFusedLinearGRPOLoss computes log-probs from hidden states and an LM head, chunk by chunk, and
applies ``LigerFusedLinearGRPOFunction.ppo_loss_fn`` to each chunk's log-probs; the adapter calls that
static method on the whole batch (one chunk), with the module's defaults.
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting

FUNCTION = "liger_kernel.chunked_loss.grpo_loss.LigerFusedLinearGRPOFunction.ppo_loss_fn"

SETTINGS = (
    Setting("defaults", {"loss_type": "sapo"},
            "LigerFusedLinearGRPOLoss defaults with loss_type='sapo' (beta=0.04 against a reference equal to the "
            "current policy: zero KL)"),
    Setting("paper", {"loss_type": "sapo", "sapo_temperature_pos": TAU_POS, "sapo_temperature_neg": TAU_NEG,
                      "importance_sampling_level": "token"},
            "the defaults already are the paper's setting; Liger refuses importance_sampling_level='sequence' "
            "for SAPO"),
)


def load():
    from liger_kernel.chunked_loss.grpo_loss import LigerFusedLinearGRPOFunction

    return LigerFusedLinearGRPOFunction.ppo_loss_fn


def make_loss(ppo_loss_fn, options):
    def loss(logp, old_logp, advantages, mask):
        m = mask.to(logp.dtype)
        out, _ = ppo_loss_fn(per_token_logps=logp, attention_mask=m, advantages=advantages,
                             full_attention_mask=m, old_per_token_logps=old_logp, **options)
        return out

    return loss
