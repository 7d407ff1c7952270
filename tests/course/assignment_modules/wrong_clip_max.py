"""Planted mistake: max instead of min in the clipped surrogate."""
import torch
from from_handout import *  # noqa: F403
from from_handout import masked_mean


def clipped_surrogate_loss(logp, behavior_logp, advantages, mask, eps=0.2):
    r = torch.exp(logp - behavior_logp.detach())
    a = advantages[:, None]
    return masked_mean(-torch.maximum(r * a, r.clamp(1 - eps, 1 + eps) * a), mask)
