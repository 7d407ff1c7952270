"""AReaL 1.0.4: sapo_loss_fn, with the arguments its actor's grpo_loss_fn passes when actor.use_sapo_loss=true.

The actor's own normalisation across micro-batches is not reproduced: the findings are at the function level.
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "areal.utils.functional.sapo_loss_fn"

_TAUS = {"tau_pos": TAU_POS, "tau_neg": TAU_NEG}  # PPOActorConfig: sapo_tau_pos=1.0, sapo_tau_neg=1.05

SETTINGS = (
    Setting("defaults", {**_TAUS, "importance_sampling_level": "token"},
            "PPOActorConfig defaults with use_sapo_loss=true: token-level ratios"),
    Setting("paper", None,
            "no option changes the aggregation: sapo_loss_fn divides the masked token sum by the batch's token "
            "count"),
    Setting("sequence", {**_TAUS, "importance_sampling_level": "sequence"},
            "importance_sampling_level='sequence' (GSPO's sequence ratio)", level="sequence"),
)

SOURCES = (
    Source("areal/utils/functional/functional.py", 562, 638,
           "941a88c0c6a082625b075196f433cb336a2a15b8c45cd20527d64e0f211c75f0",
           "sapo_loss_fn: (4/tau) sigmoid gate, r = exp(log r) unclamped, masked sum / the batch's token count"),
    Source("areal/trainer/ppo/actor.py", 408, 596,
           "32fa42bdb82943e47d6ce517ebf2cce0351b3d4fc0ac75dbe4f8a49e54ac638d",
           "grpo_loss_fn: calls sapo_loss_fn with per-token advantages when use_sapo_loss"),
)

# Read from those lines: a token pool (one mean over the batch's tokens); in float32 exp(log r) overflows.
EXPECTED = {"defaults": ["aggregation"], "sequence": ["aggregation"]}
EXPECTED_FLOAT32 = {k: [*v, "extreme log-ratios"] for k, v in EXPECTED.items()}


def load():
    from areal.utils.functional import sapo_loss_fn

    return sapo_loss_fn


def make_loss(sapo_loss_fn, options):
    def loss(logp, old_logp, advantages, mask):
        token_adv = advantages[:, None].expand_as(logp)  # AReaL's advantages are per token
        out, _ = sapo_loss_fn(logprobs=logp, old_logprobs=old_logp, advantages=token_adv, loss_mask=mask, **options)
        return out

    return loss
