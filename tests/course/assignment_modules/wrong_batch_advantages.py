"""Planted mistake: the update normalises rewards over the whole batch, not per group."""
from from_handout import *  # noqa: F403
from from_handout import group_advantages, sapo_loss


def update_loss(logp, behavior_logp, rewards, mask, tau_pos=1.0, tau_neg=1.05):
    adv = group_advantages(rewards.reshape(1, -1)).reshape(-1)
    return sapo_loss(logp, behavior_logp, adv, mask, tau_pos, tau_neg)
