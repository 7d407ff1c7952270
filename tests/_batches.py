"""Random policy-loss inputs for the loss and kernel tests: ``(logp, behavior_logp, advantages, mask)``."""

import torch

from sapo_lab import mask_from_lengths


def random_batch(batch=5, tokens=7, spread=0.3, seed=0, lengths=None, zero_first_advantage=False):
    """``logp`` (with grad) in [-3, 0], behavior log-probs ``spread``-normal around it, normal advantages
    (the first set to 0 with ``zero_first_advantage``), and a mask of random lengths unless given."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(batch, tokens, generator=g) * 3
    behavior = logp + spread * torch.randn(batch, tokens, generator=g)
    adv = torch.randn(batch, generator=g)
    if zero_first_advantage:
        adv[0] = 0.0
    if lengths is None:
        lengths = torch.randint(1, tokens + 1, (batch,), generator=g)
    return logp.requires_grad_(True), behavior, adv, mask_from_lengths(lengths, tokens)
