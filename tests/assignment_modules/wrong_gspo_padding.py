"""Planted mistake: padding included in GSPO's mean log ratio."""
import torch
from wraps_sapo_lab import *  # noqa: F403


def gspo_sequence_ratio(logp, behavior_logp, mask):
    return torch.exp((logp - behavior_logp.detach()).mean(-1))
