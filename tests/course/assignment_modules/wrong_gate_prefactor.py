"""Planted mistake: the gate without its 4/tau prefactor."""
import torch
from from_handout import *  # noqa: F403


def sapo_gate(ratio, tau):
    return torch.sigmoid(tau * (ratio - 1.0))
