"""The loss's speed-only paths: each returns exactly what the plain computation it replaces returns.

:func:`sapo_lab.objective.losses.policy_loss` runs on every minibatch of every step, so its small
per-call costs add up. Each function here does a plain torch operation with fewer kernels or a
remembered answer, and gives that operation's values bit for bit (``tests/training/test_speed_identity.py``
holds each to the plain form):

* :func:`check_settings`: a kernel's settings check, remembered for plain numbers that passed;
* :func:`finite_by_sum`: "every entry is finite" from one sum;
* :func:`mask_positions` and :func:`take`: boolean-mask indexing ``t[m]`` as one ``nonzero`` shared
  by several gathers;
* :func:`quantile_stats` and :func:`sorted_quantiles`: ``torch.quantile`` from one sort, with the
  ranks remembered per length.
"""

from __future__ import annotations

import functools

import torch

from .registry import kernel_for


def check_settings(kernel, settings: list) -> None:
    """``kernel.check(*settings)``, remembered for plain numbers that passed: the trainer asks the same every step."""
    if all(type(v) in (float, int) for v in settings):
        _checked_numbers(kernel.name, tuple(settings))
    else:
        kernel.check(*settings)


@functools.lru_cache(maxsize=64)
def _checked_numbers(loss_type: str, settings: tuple) -> None:
    kernel_for(loss_type).check(*settings)  # raises for bad settings, and a raise is not cached


def finite_by_sum(t: torch.Tensor) -> bool:
    """True when every entry is finite, decided from the sum: one NaN or inf makes it non-finite. False can also
    mean a sum that overflowed, so the caller then checks entry by entry."""
    return bool(torch.isfinite(t.detach().sum()))


def mask_positions(mask: torch.Tensor) -> torch.Tensor:
    """Row-major positions of a boolean mask's True entries: ``take(t, mask_positions(m))`` is ``t[m]``."""
    return mask.reshape(-1).nonzero().squeeze(1)


def take(t: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """The entries of ``t`` at row-major positions ``at`` (what boolean indexing gathers, without its nonzero)."""
    return t.reshape(-1).index_select(0, at)


def quantile_stats(values: torch.Tensor, prefix: str, quantiles=(0.05, 0.5, 0.95), empty=float("nan")) -> dict:
    """``{PREFIX_qNN: quantile}`` of a 1-D tensor, computed in float64; ``empty`` for every key when it has no values.

    The values are those of ``torch.quantile`` (linear interpolation), bit for bit: see :func:`sorted_quantiles`.
    """
    keys = [f"{prefix}_q{round(q * 100):02d}" for q in quantiles]
    if values.numel() == 0:
        return dict.fromkeys(keys, empty)
    ordered = values.detach().double().flatten().sort().values
    return dict(zip(keys, sorted_quantiles(ordered, tuple(quantiles)), strict=True))


def sorted_quantiles(ordered: torch.Tensor, quantiles: tuple) -> list[float]:
    """``torch.quantile(values, quantiles).tolist()`` for the ascending sort ``ordered`` of ``values`` (1-D, non-empty).

    The same operations as torch's linear interpolation (rank q (n - 1), gather below and
    above, ``lerp_`` by the rank's fraction), with the ranks cached per (n, quantiles) and
    without the argument checks: one sort and a few small kernels instead of a dozen.
    Any NaN sorts last and makes every quantile NaN, as in torch, which is what the rare
    NaN case delegates to.
    """
    if bool(ordered[-1].isnan()):
        q = torch.tensor(quantiles, dtype=ordered.dtype, device=ordered.device)
        return torch.quantile(ordered, q).tolist()
    below, above, fraction = _quantile_ranks(ordered.numel(), quantiles, ordered.dtype, ordered.device)
    return ordered.gather(-1, below).lerp_(ordered.gather(-1, above), fraction).tolist()


@functools.lru_cache(maxsize=512)
def _quantile_ranks(n: int, quantiles: tuple, dtype, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Indices below and above each quantile's rank q (n - 1) in a sorted tensor of ``n``, and the rank's fraction."""
    ranks = torch.tensor(quantiles, dtype=dtype, device=device) * (n - 1)
    below = ranks.to(torch.long)
    return below, ranks.ceil().to(torch.long), ranks - below
