"""Liger-Kernel 0.8.5: the GRPO loss of its chunked fused-linear module, with loss_type="sapo".

LigerFusedLinearGRPOLoss computes log-probs from hidden states and an LM head, chunk by chunk, and
applies ``LigerFusedLinearGRPOFunction.ppo_loss_fn`` to each chunk's log-probs; the adapter calls that
static method on the whole batch (one chunk), with the module's defaults. The module computes log-probs from
hidden states, so it cannot be called with the audit's log-probs: the findings are at the function level.
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

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

SOURCES = (
    Source("liger_kernel/chunked_loss/grpo_loss.py", 101, 267,
           "b4ea24c05ac63f9981de71d0d931087661a63c1f4255363aefa4a75b22b67aa6",
           "ppo_loss_fn: r = exp(logp - old) unclamped at token level, per-sequence mean of token losses"),
    Source("liger_kernel/chunked_loss/grpo_loss.py", 54, 74,
           "b4ea24c05ac63f9981de71d0d931087661a63c1f4255363aefa4a75b22b67aa6",
           "sapo_loss_fn: (4/tau) sigmoid(tau (r - 1))"),
)

# Read from those lines: the paper's objective; in float32 exp(log r) overflows above log r = 88.72 (NaN).
EXPECTED = {"defaults": [], "paper": []}
EXPECTED_FLOAT32 = {"defaults": ["extreme log-ratios"], "paper": ["extreme log-ratios"]}


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
