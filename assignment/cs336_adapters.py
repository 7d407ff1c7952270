"""The assignment's functions under the adapter names and signatures of Stanford CS336 (2026) assignment 5.

A course that already uses that assignment adds SAPO as one more ``importance_reweighting_method``: point
``STUDENT`` at the student's filled-in ``sapo_assignment`` module (or set SAPO_ASSIGNMENT to its path) and call
these adapters from the course's own tests. Nothing is imported from the course's repository; the signatures
follow its published ``tests/adapters.py``, with ``"sapo"`` and its two temperatures added.
"""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path
from typing import Literal

import torch

_PATH = Path(os.environ.get("SAPO_ASSIGNMENT", Path(__file__).with_name("sapo_assignment.py")))
_spec = importlib.util.spec_from_file_location("sapo_assignment_for_cs336", _PATH)
STUDENT = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(STUDENT)


def run_compute_group_normalized_rewards(
    raw_rewards: torch.Tensor,
    group_size: int,
    baseline: Literal["mean", "none"] = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: Literal["std", "none", "mean"] = "std",
    std: Literal["population", "sample"] = "population",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Flat rewards (rollout_batch_size,) -> flat advantages; only the GRPO setting (mean, std) is the
    assignment's ``group_advantages``, the others are refused. ``std``: the assignment's population standard
    deviation (divided by G), or the sample one (divided by G - 1, ``torch.std``'s default, which CS336's own
    snapshot expects), both through the student's function: for a group scaled by k = sqrt(G / (G - 1)),
    group_advantages(k R) / k = (R - mean) / (k * population std + eps) = (R - mean) / (sample std + eps)."""
    if (baseline, advantage_normalizer) != ("mean", "std"):
        raise ValueError("the SAPO assignment implements baseline='mean' with advantage_normalizer='std' only")
    if std not in ("population", "sample"):
        raise ValueError(f"std must be 'population' or 'sample', got {std!r}")
    grouped = raw_rewards.reshape(-1, group_size)
    if std == "population":
        adv = STUDENT.group_advantages(grouped, advantage_eps)
    else:
        if group_size < 2:
            raise ValueError("the sample standard deviation needs groups of at least 2")
        k = math.sqrt(group_size / (group_size - 1))
        adv = STUDENT.group_advantages(grouped * k, advantage_eps) / k
    adv = adv.reshape(-1)
    return adv, {"reward_mean": float(raw_rewards.mean()), "advantage_abs_mean": float(adv.abs().mean())}


def run_compute_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    importance_reweighting_method: Literal["none", "noclip", "grpo", "gspo", "sapo"] = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    response_mask: torch.Tensor | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss (batch, seq). ``"sapo"``: the student's ``sapo_loss`` evaluated on each token as a one-token
    response, so its temperature choice, sign, gate and detach are the ones tested (one call per token: meant for
    tests, not for training). The other methods are the course's own; this adapter answers only for ``"sapo"``."""
    if importance_reweighting_method != "sapo":
        raise NotImplementedError("this adapter adds 'sapo'; the other methods are the course's own")
    if old_log_probs is None:
        raise ValueError("sapo needs old_log_probs")
    adv = raw_rewards_or_advantages.reshape(-1).to(policy_log_probs.dtype)
    one = torch.ones(1, 1, dtype=policy_log_probs.dtype)
    rows = []
    for i in range(policy_log_probs.shape[0]):
        rows.append(torch.stack([
            STUDENT.sapo_loss(policy_log_probs[i:i + 1, t:t + 1], old_log_probs[i:i + 1, t:t + 1], adv[i:i + 1], one,
                              tau_pos, tau_neg).reshape(())
            for t in range(policy_log_probs.shape[1])]))
    per_token = torch.stack(rows)
    ratio = torch.exp(policy_log_probs - old_log_probs).detach()
    return per_token, {"ratio_mean": ratio.mean()}


def run_masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over the masked elements (all of them when ``dim`` is None, else along ``dim``)."""
    m = mask.to(tensor.dtype)
    if dim is None:
        return (tensor * m).sum() / m.sum()
    return (tensor * m).sum(dim) / m.sum(dim)


def run_aggregate_loss_across_microbatch(
    per_token_policy_gradient_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_normalization: Literal["sequence", "constant"] = "sequence",
    normalization_constant: int | None = None,
) -> torch.Tensor:
    """"sequence": the assignment's per-response ``masked_mean``; "constant": masked sum / constant."""
    if loss_normalization == "sequence":
        return STUDENT.masked_mean(per_token_policy_gradient_loss, mask, "per_response")
    if normalization_constant is None:
        raise ValueError("loss_normalization='constant' needs normalization_constant")
    return (per_token_policy_gradient_loss * mask.to(per_token_policy_gradient_loss.dtype)).sum() / normalization_constant
