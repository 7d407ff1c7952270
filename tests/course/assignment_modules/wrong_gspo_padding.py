"""Planted mistake: padding included in GSPO's mean log ratio."""
import torch
from from_handout import *  # noqa: F403


def gspo_sequence_ratio(logp, behavior_logp, mask):
    return torch.exp((logp - behavior_logp.detach()).mean(-1))
