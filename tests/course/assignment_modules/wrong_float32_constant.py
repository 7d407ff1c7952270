"""Planted mistake: the gate's 4/tau prefactor built as a float32 tensor (torch.tensor(4.0) is float32), so the
result is a float64 tensor whose numbers carry float32's rounding of 4/tau."""
import torch
from from_handout import *  # noqa: F403


def sapo_gate(ratio, tau):
    return torch.tensor(4.0) / tau * torch.sigmoid(tau * (ratio - 1.0))
