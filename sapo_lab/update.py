"""One update of Algorithm 2: a minibatch's teacher-forced log-probs, the loss, one optimizer step.

Responses whose advantage is exactly 0 add nothing to the policy gradient. With
``skip_zero_advantage`` (only when ``beta == 0``: the KL term does see them) they are
left out of the forward/backward and the loss is rescaled to the full minibatch's
normalisation, which gives the same update for less compute. A minibatch with no
non-zero advantage still takes an optimizer step with a zero gradient, because AdamW
moves the weights through its momentum even then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .device import ModelTimer, autocast_for
from .errors import NonFiniteError, TrainingDiverged
from .losses import kl_to_reference, policy_loss
from .model import response_logprobs
from .rollout import MiniBatch


@dataclass
class UpdateResult:
    """What one minibatch update reports to the metrics row."""

    loss: float  # the minimized scalar (policy loss, rescaled, plus beta * KL)
    grad_norm: float  # before clipping
    tokens_trained: int  # completion tokens that went through forward and backward
    stats: dict | None = None  # policy_loss's diagnostics; None when nothing was trained
    kl_ref: float | None = None  # only with beta > 0


def learning_rate_at(step: int, total: int, cfg) -> float:
    """LR for optimizer step ``step`` (0-based) of ``total``, per ``lr_scheduler_type``."""
    o = cfg.optimization
    base = o.learning_rate
    warm = o.warmup_steps if o.lr_scheduler_type != "constant" else 0
    if warm and step < warm:
        return base * (step + 1) / warm
    if o.lr_scheduler_type in ("constant", "constant_with_warmup"):
        return base
    progress = min(1.0, (step - warm) / max(1, total - warm))
    if o.lr_scheduler_type == "linear":
        return base * (1.0 - progress)
    return base * 0.5 * (1.0 + math.cos(math.pi * progress))


def zero_advantage_scale(mb: MiniBatch, keep: torch.Tensor, aggregation: str) -> float:
    """The factor that turns the loss over the kept rows into the full minibatch's normalisation."""
    if aggregation == "per_response":
        return float(keep.sum()) / keep.numel()
    cm = mb.completion_mask
    return float(cm[keep].sum()) / float(cm.sum())


def minibatch_update(model, optimizer, mb: MiniBatch, cfg, *, lr: float, timer: ModelTimer, where: str) -> UpdateResult:
    """Set the LR, compute the loss of ``mb``, backpropagate, clip and step; ``where`` labels a divergence."""
    o, lc = cfg.optimization, cfg.loss
    for group in optimizer.param_groups:
        group["lr"] = lr
    scale = 1.0
    if o.skip_zero_advantage and o.beta == 0:
        keep = mb.advantages != 0
        scale = zero_advantage_scale(mb, keep, lc.aggregation)
        if not bool(keep.any()):
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            optimizer.step()
            return UpdateResult(loss=0.0, grad_norm=0.0, tokens_trained=0)
        mb = mb.select(keep)
    model.train()
    with timer, autocast_for(mb.input_ids.device):
        logp = response_logprobs(model, mb.input_ids, mb.attention_mask, mb.response_mask, temperature=cfg.rollout.temperature)
    mask = mb.completion_mask
    try:
        out = policy_loss(logp, mb.behavior_logp, mb.advantages, mask, **lc.policy_loss_kwargs())
    except NonFiniteError as exc:
        raise TrainingDiverged(f"{where}: {exc}") from exc
    loss = out.loss * scale if scale != 1.0 else out.loss
    kl = None
    if mb.ref_logp is not None:
        kl = kl_to_reference(logp, mb.ref_logp, mask, aggregation=lc.aggregation)
        loss = loss + o.beta * kl
    if not torch.isfinite(loss):
        raise TrainingDiverged(f"{where}: loss is {float(loss.detach())}")
    max_norm = o.max_grad_norm if o.max_grad_norm > 0 else float("inf")
    with timer:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
        if not math.isfinite(grad_norm):
            raise TrainingDiverged(f"{where}: gradient norm is {grad_norm}")
        optimizer.step()
    return UpdateResult(
        loss=float(loss.detach()),
        grad_norm=grad_norm,
        tokens_trained=int(mask.sum()),
        stats=out.stats,
        kl_ref=None if kl is None else float(kl.detach()),
    )
