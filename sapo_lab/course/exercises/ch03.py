"""Chapter 3's coded exercises: group advantages."""

from __future__ import annotations

import torch

from ...objective.advantages import group_advantages
from ..checks import Exercise
from ..mistakes import GROUP_ADVANTAGES


def _advantage_cases() -> list[dict]:
    """Binary and real rewards, a group whose rewards are all equal, G = 2, and an eps large enough that where it
    is added shows (inside or outside the square root)."""
    gen = torch.Generator().manual_seed(2031)
    binary = torch.randint(0, 2, (5, 6), generator=gen).to(torch.float64)
    binary[0] = 1.0  # every response succeeds: the advantages must be exactly zero
    binary[1] = torch.tensor([1.0, 0, 0, 0, 0, 0], dtype=torch.float64)  # a single success
    real = torch.randn(3, 4, generator=gen, dtype=torch.float64) * 2.0 + 0.5
    pair = torch.tensor([[0.0, 1.0], [0.3, 0.9]], dtype=torch.float64)
    return [dict(rewards=binary, eps=1e-6), dict(rewards=real, eps=0.25), dict(rewards=pair, eps=1e-6)]


EXERCISES = [
    Exercise(id="03.advantages", function="group_advantages", reference=group_advantages, cases=_advantage_cases,
             mistakes=GROUP_ADVANTAGES),
]
