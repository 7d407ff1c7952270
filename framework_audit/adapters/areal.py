"""AReaL 1.0.4: sapo_loss_fn, called as its actor's grpo_loss_fn calls it when actor.use_sapo_loss=true."""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting

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


def load():
    from areal.utils.functional import sapo_loss_fn

    return sapo_loss_fn


def make_loss(sapo_loss_fn, options):
    def loss(logp, old_logp, advantages, mask):
        token_adv = advantages[:, None].expand_as(logp)  # AReaL's advantages are per token
        out, _ = sapo_loss_fn(logprobs=logp, old_logprobs=old_logp, advantages=token_adv, loss_mask=mask, **options)
        return out

    return loss
