"""Chapter 3's coded exercises: group advantages, and the two ways of averaging token values."""

from __future__ import annotations

import torch

from ...objective.advantages import group_advantages
from ...objective.masks import masked_mean
from ..checks import Exercise
from ..mistakes import GROUP_ADVANTAGES, MASKED_MEAN


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


def _masked_mean_cases() -> list[dict]:
    """Both aggregations on the same batches: unequal lengths (where the two differ), equal lengths (where
    they agree), a response of one token, and padding that holds large finite numbers, so that a value read
    from the padding shows."""
    gen = torch.Generator().manual_seed(2032)

    def batch(lengths, width):
        values = torch.randn(len(lengths), width, generator=gen, dtype=torch.float64)
        mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).to(torch.float64)
        padding = 50.0 + 10.0 * torch.rand(len(lengths), width, generator=gen, dtype=torch.float64)
        return torch.where(mask > 0, values, padding), mask

    unequal, equal, short = batch([2, 7, 4], 7), batch([3, 3], 5), batch([1, 6], 6)
    return [dict(values=v, mask=m, aggregation=agg)
            for v, m in (unequal, equal, short) for agg in ("per_response", "token_pool")]


EXERCISES = [
    Exercise(id="03.advantages", function="normalized_advantages", reference=group_advantages,
             cases=_advantage_cases, mistakes=GROUP_ADVANTAGES),
    Exercise(id="03.masked_mean", function="masked_mean", reference=masked_mean, cases=_masked_mean_cases,
             mistakes=MASKED_MEAN),
]
