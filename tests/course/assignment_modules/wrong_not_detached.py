"""Planted mistake: the behaviour log-probs not detached in the SAPO loss."""
import torch
from from_handout import *  # noqa: F403
from from_handout import masked_mean


def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
    r = torch.exp(logp - behavior_logp)
    a = advantages[:, None].expand_as(logp)
    tau = torch.where(a > 0, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
    return masked_mean(-a * (4.0 / tau) * torch.sigmoid(tau * (r - 1.0)), mask)
