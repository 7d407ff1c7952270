"""Trinity-RFT 0.6.0: its registered "sapo" policy loss, called as its verl backend calls it."""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting

FUNCTION = "trinity.algorithm.policy_loss_fn.sapo_policy_loss.SAPOPolicyLossFn"

SETTINGS = (
    Setting("defaults", {}, "SAPOPolicyLossFn.default_args(): loss_agg_mode='token-mean'"),
    Setting("paper", {"tau_pos": TAU_POS, "tau_neg": TAU_NEG, "loss_agg_mode": "seq-mean-token-mean"},
            "per-response mean of token losses"),
)


def load():
    from trinity.algorithm.policy_loss_fn.sapo_policy_loss import SAPOPolicyLossFn

    return SAPOPolicyLossFn


def make_loss(loss_class, options):
    fn = loss_class(**options)  # backend "verl": keyword names as verl's actor passes them

    def loss(logp, old_logp, advantages, mask):
        token_adv = advantages[:, None].expand_as(logp)
        return fn(logprob=logp, old_log_probs=old_logp, response_mask=mask, advantages=token_adv)[0]

    return loss
