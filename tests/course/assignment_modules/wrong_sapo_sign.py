"""Planted mistake: the SAPO loss with its sign flipped (+A f(r) minimized): training must not pass with it."""
import from_handout
from from_handout import *  # noqa: F403


def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
    return -from_handout.sapo_loss(logp, behavior_logp, advantages, mask, tau_pos, tau_neg)
