"""The row that ``metrics.jsonl`` gets for one rollout step: a pure function of what the step produced."""

from __future__ import annotations

import math
from collections import Counter

import torch

from ..objective.diagnostics import ratio_quantiles, step_diagnostics
from ..objective.losses import SIGNAL_CELLS
from ..objective.registry import kernel_for
from ..runs.metric_names import STEP, under
from .rollout import RolloutBatch
from .update import UpdateResult

# Diagnostics of policy_loss averaged over the step's trained minibatches.
AVERAGED_STATS = (
    "approx_kl",
    "coef_q05",
    "coef_q50",
    "coef_q95",
    "signal_removed_frac",
    "signal_removed_frac_pos",
    "signal_removed_frac_neg",
    *(f"signal_removed_frac_{sign}_{side}" for sign, side in SIGNAL_CELLS),
    *(f"signal_share_{sign}_{side}" for sign, side in SIGNAL_CELLS),
    "clip_frac",
)


def pooled_ratio_quantiles(updates: list[UpdateResult], tau_pos: float, tau_neg: float) -> dict:
    """Quantiles of r and r w(r) over every token the step's updates trained, as each update saw it.

    Pooling the M minibatches (not averaging their quantiles) keeps the tails of the stale
    minibatches, which are the ones that matter. ``None`` values when nothing was trained.
    """
    seen = [u for u in updates if u.log_ratio is not None]
    if not seen:
        empty = torch.zeros(1, 1)
        return ratio_quantiles(empty, empty.bool(), torch.zeros(1), tau_pos=tau_pos, tau_neg=tau_neg)
    return ratio_quantiles(
        torch.cat([u.log_ratio for u in seen]), torch.cat([u.mask for u in seen]),
        torch.cat([u.advantages for u in seen]), tau_pos=tau_pos, tau_neg=tau_neg)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def metrics_row(
    step: int,
    batch: RolloutBatch,
    updates: list[UpdateResult],
    *,
    lr: float,
    loss_type: str,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    counters: dict,
    step_s: float,
    model_s: float,
    elapsed_s: float,
) -> dict:
    """One metrics row from a rollout batch and its M minibatch updates (keys: :mod:`.metric_names`).

    ``counters`` are the run's totals after this step; ``step_s`` the step's wall time and
    ``model_s`` the part of it spent in model work (sampling, forwards, backward, optimizer),
    so ``time/non_model_frac`` is the share of bookkeeping. A statistic no minibatch could
    measure (all of them zero-advantage) is ``None``; ``losses/clip_frac`` is absent for kernels
    without a hard clip. ``rollout/`` holds the rollout's :func:`step_diagnostics`, ``ratio/``
    the ratio and r w(r) quantiles pooled over the trained tokens (``tau_pos``/``tau_neg`` set
    SAPO's w), and ``tokseq/`` the gradient comparison of any update that made one.
    """
    comp_mask = batch.completion_mask
    trained = [u.stats for u in updates if u.stats is not None]
    truncated = torch.tensor([not ep.finished for ep in batch.episodes]) if batch.episodes else None
    rollout = step_diagnostics(rewards=batch.grouped_rewards(), advantages=batch.advantages, mask=comp_mask,
                               entropy=batch.entropy, truncated=truncated, tau_pos=tau_pos, tau_neg=tau_neg)
    rollout.update({
        "reward_mean": float(batch.rewards.mean()),
        "reasons": dict(Counter(ep.reason for ep in batch.episodes)),
        "tokens_generated": int(comp_mask.sum()),
    })
    row = {STEP: step, **under("rollout", rollout)}
    row.update(under("ratio", pooled_ratio_quantiles(updates, tau_pos, tau_neg), strip="ratio_"))
    row.update(under("ratio", {
        "q95_last_minibatch": trained[-1].get("ratio_q95") if trained else None,
        "max_abs_log_ratio": max((s.get("max_abs_log_ratio", 0.0) for s in trained), default=0.0),
        "beyond_max_log_ratio": sum(s.get("beyond_max_log_ratio", 0) for s in trained),
    }))
    row.update(under("losses", _loss_columns(updates, trained, loss_type)))
    row.update(under("optim", {
        "lr": lr,
        "grad_norm": _mean(u.grad_norm for u in updates),
        "grad_norm_max": max(u.grad_norm for u in updates),
        "tokens_trained": sum(u.tokens_trained for u in updates),
    }))
    row.update(under("counters", counters))
    row.update(under("time", {
        "step_s": step_s,
        "non_model_frac": max(0.0, step_s - model_s) / step_s,
        "elapsed_s": elapsed_s,
        "diagnostics_s": sum(u.comparison_s for u in updates),
    }))
    compared = [u.gradient_comparison for u in updates if u.gradient_comparison is not None]
    if compared:
        row.update(under("tokseq", compared[-1], strip="tokseq_"))
    return row


def _loss_columns(updates: list[UpdateResult], trained: list[dict], loss_type: str) -> dict:
    """The loss and :data:`AVERAGED_STATS` averaged over the minibatches, the empty responses they saw, the KL."""
    out = {"loss": _mean(u.loss for u in updates)}
    for key in AVERAGED_STATS:
        vals = [s[key] for s in trained if key in s and math.isfinite(s[key])]
        if vals:
            out[key] = _mean(vals)
        elif key != "clip_frac" or kernel_for(loss_type).hard_clip:  # clip_frac exists only for hard clips
            out[key] = None  # every minibatch was all zero-advantage (or the cell was empty): nothing to measure
    out["empty_responses"] = sum(s.get("empty_responses", 0) for s in trained)
    kls = [u.kl_ref for u in updates if u.kl_ref is not None]
    if kls:
        out["kl_ref"] = _mean(kls)
    return out
