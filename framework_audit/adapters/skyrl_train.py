"""skyrl-train 0.3.1: sapo_policy_loss, with trainer.algorithm from its packaged ppo_base_config.yaml."""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting

FUNCTION = "skyrl_train.utils.ppo_utils.sapo_policy_loss"

SETTINGS = (
    Setting("defaults", {"policy_loss_type": "sapo"},
            "ppo_base_config.yaml with policy_loss_type='sapo': loss_reduction='token_mean' (SAPO warns)"),
    Setting("paper", {"policy_loss_type": "sapo", "loss_reduction": "sequence_mean",
                      "sapo": {"tau_pos": TAU_POS, "tau_neg": TAU_NEG}},
            "loss_reduction='sequence_mean', as the warning recommends"),
)


def load():
    from importlib.resources import files

    from omegaconf import OmegaConf
    from skyrl_train.utils.ppo_utils import sapo_policy_loss

    return sapo_policy_loss, OmegaConf.load(files("skyrl_train") / "config" / "ppo_base_config.yaml")


def make_loss(function, options):
    from omegaconf import OmegaConf

    sapo_policy_loss, base = function
    algorithm = OmegaConf.merge(base.trainer.algorithm, options)
    # validate_cfg (skyrl_train/utils/utils.py) adds this field before building the loss
    algorithm.max_seq_len = base.generator.max_input_length + base.generator.sampling_params.max_generate_length

    def loss(logp, old_logp, advantages, mask):
        token_adv = advantages[:, None].expand_as(logp)  # skyrl's advantages are per token
        out, _ = sapo_policy_loss(logp, old_logp, token_adv, algorithm, loss_mask=mask.to(logp.dtype))
        return out

    return loss
