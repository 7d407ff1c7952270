"""The row that ``metrics.jsonl`` gets for one rollout step: a pure function of what the step produced."""

from __future__ import annotations

import math
from collections import Counter

from .rollout import RolloutBatch
from .update import UpdateResult

# Diagnostics of policy_loss averaged over the step's trained minibatches.
AVERAGED_STATS = (
    "approx_kl",
    "ratio_q05",
    "ratio_q50",
    "ratio_q95",
    "coef_q05",
    "coef_q50",
    "coef_q95",
    "signal_removed_frac",
    "clip_frac",
)


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
    counters: dict,
    step_s: float,
    model_s: float,
    elapsed_s: float,
) -> dict:
    """One metrics row from a rollout batch and its K minibatch updates.

    ``counters`` are the run's totals after this step; ``step_s`` the step's wall time and
    ``model_s`` the part of it spent in model work (sampling, forwards, backward, optimizer),
    so ``non_model_frac`` is the share of bookkeeping. A statistic no minibatch could
    measure (all of them zero-advantage) is ``None``; ``clip_frac`` is absent for SAPO.
    """
    comp_mask = batch.completion_mask
    grouped = batch.grouped_rewards()
    zero_groups = int((grouped.max(-1).values == grouped.min(-1).values).sum())
    trained = [u.stats for u in updates if u.stats is not None]
    row = {
        "step": step,
        "reward_mean": float(batch.rewards.mean()),
        "response_length_mean": float(comp_mask.sum(-1).float().mean()),
        "entropy": float((batch.entropy * comp_mask).sum() / comp_mask.sum()),
        "loss": _mean(u.loss for u in updates),
        "grad_norm": _mean(u.grad_norm for u in updates),
        "grad_norm_max": max(u.grad_norm for u in updates),
        "zero_advantage_groups": zero_groups,
        "zero_advantage_group_frac": zero_groups / grouped.shape[0],
        "lr": lr,
        "reasons": dict(Counter(ep.reason for ep in batch.episodes)),
        "tokens_generated": int(comp_mask.sum()),
        "tokens_trained": sum(u.tokens_trained for u in updates),
        **{f"total_{k}": v for k, v in counters.items()},
        "step_s": step_s,
        "non_model_frac": max(0.0, step_s - model_s) / step_s,
        "elapsed_s": elapsed_s,
    }
    for key in AVERAGED_STATS:
        vals = [s[key] for s in trained if key in s and math.isfinite(s[key])]
        if vals:
            row[key] = _mean(vals)
        elif key != "clip_frac" or loss_type != "sapo":
            row[key] = None  # every minibatch was all zero-advantage: nothing to measure
    row["ratio_q95_last_minibatch"] = trained[-1].get("ratio_q95") if trained else None
    row["max_abs_log_ratio"] = max((s.get("max_abs_log_ratio", 0.0) for s in trained), default=0.0)
    row["beyond_max_log_ratio"] = sum(s.get("beyond_max_log_ratio", 0) for s in trained)
    row["empty_responses"] = sum(s.get("empty_responses", 0) for s in trained)
    kls = [u.kl_ref for u in updates if u.kl_ref is not None]
    if kls:
        row["kl_ref"] = _mean(kls)
    return row
