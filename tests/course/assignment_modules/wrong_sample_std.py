"""Planted mistake: the group's sample std (divided by G - 1)."""
from from_handout import *  # noqa: F403


def group_advantages(rewards, eps=1e-6):
    return (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + eps)
