"""Trinity-RFT 0.6.0: its registered "sapo" policy loss, configured and called as its verl backend does.

The loss is built from ``algorithm.policy_loss_fn_args`` (SAPOPolicyLossFn.default_args() unless set), and the
config validator then overwrites their ``loss_agg_mode`` with ``algorithm.loss_agg_mode`` (default
"token-mean"): the aggregation is chosen at the algorithm level, whatever the loss's own argument says. The
adapter composes the arguments that way and calls the loss with the keyword names trainer/verl/losses.py uses.
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "trinity.algorithm.policy_loss_fn.sapo_policy_loss.SAPOPolicyLossFn"

SETTINGS = (
    Setting("defaults", {}, "algorithm.loss_agg_mode unset: 'token-mean' (config_validator)",
            finding_level="training"),
    Setting("paper", {"loss_agg_mode": "seq-mean-token-mean",
                      "policy_loss_fn_args": {"tau_pos": TAU_POS, "tau_neg": TAU_NEG}},
            "algorithm.loss_agg_mode='seq-mean-token-mean' (policy_loss_fn_args' own loss_agg_mode is "
            "overwritten by it)", finding_level="training"),
)

SOURCES = (
    Source("trinity/algorithm/policy_loss_fn/sapo_policy_loss.py", 16, 158,
           "40dbf1f4d3fd62a441e948b84c2f281afcae9b155348b3c11299f13faacb08b8",
           "loss -A * sg(f(r)) * log p: the gate's value, detached, times log p"),
    Source("trinity/common/config_validator.py", 385, 413,
           "256b0cba8abbc4206931de386bcede07523ad294345f9ac03e421970193d1ae0",
           "loss_agg_mode defaults to token-mean and overwrites policy_loss_fn_args['loss_agg_mode']"),
)

# Read from those lines: the gradient is -A f(r) (f's value, not its slope r f'(r)), so the on-policy factor is
# 2/tau, the shape is 2 sigmoid(tau (r-1)), no tau fits, the value's derivative is not the applied gradient;
# token-mean adds the token-pool aggregation.
_GATE = ["per-token gradient (autograd)", "per-token gradient (finite differences of the value)",
         "on-policy gradient (r = 1)", "gradient shape r*w_tau(r)", "temperature for A > 0", "temperature for A < 0"]
EXPECTED = {"defaults": [*_GATE, "aggregation"], "paper": _GATE}
EXPECTED_FLOAT32 = EXPECTED


def load():
    from trinity.algorithm.policy_loss_fn.sapo_policy_loss import SAPOPolicyLossFn

    return SAPOPolicyLossFn


def make_loss(loss_class, options):
    args = {**loss_class.default_args(), **options.get("policy_loss_fn_args", {})}
    if "loss_agg_mode" in args:  # config_validator.py: the algorithm-level mode wins
        args["loss_agg_mode"] = options.get("loss_agg_mode") or "token-mean"
    fn = loss_class(backend="verl", **args)

    def loss(logp, old_logp, advantages, mask):
        token_adv = advantages[:, None].expand_as(logp)
        # the verl backend's names (trainer/verl/losses.py passes response_mask and the select_keys)
        return fn(logprob=logp, old_log_probs=old_logp, response_mask=mask, advantages=token_adv)[0]

    return loss
