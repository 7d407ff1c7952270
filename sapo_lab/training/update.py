"""One update of Algorithm 2: a minibatch's teacher-forced log-probs, the loss, one optimizer step.

The update has two halves, so that the trainer can measure between them:
:func:`minibatch_forward` (log-probs, policy loss, KL) and :func:`optimizer_step`
(backward, clipping, one AdamW step); :func:`minibatch_update` is both. Between them,
:func:`compare_gradients` measures the token- and sequence-level gradients of the same
minibatch and their §9 decomposition
(:func:`sapo_lab.objective.diagnostics.token_sequence_gradient_comparison`) without
touching ``.grad`` or any random stream, so the update is unchanged.

Responses whose advantage is exactly 0 add nothing to the policy gradient. With
``skip_zero_advantage`` (only when ``beta == 0``: the KL term does see them) they are
left out of the forward/backward and the loss is rescaled to the full minibatch's
normalisation, which gives the same update for less compute. A minibatch with no
non-zero advantage still takes an optimizer step with a zero gradient, because AdamW
moves the weights through its momentum even then.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from ..errors import NonFiniteError, TrainingDiverged
from ..objective.diagnostics import token_sequence_gradient_comparison
from ..objective.losses import PolicyLossOutput, kl_to_reference, level_log_ratio, policy_loss
from ..objective.registry import token_level_kernel
from .device import ModelTimer, autocast_for
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
    # What the loss saw, detached, for the step's pooled ratio quantiles: (rows, tokens) log
    # ratios (at sequence level each row's mean), their mask and the rows' advantages.
    log_ratio: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    gradient_comparison: dict | None = None  # tokseq_* keys, set by the trainer when it compared
    comparison_s: float = 0.0  # wall time of the comparison (diagnostics, not model work)
    lr: float | None = None  # the learning rate of this optimizer step


def comparison_kwargs(loss_config) -> dict:
    """``policy_loss_kwargs`` for the gradient comparison, which sets the level itself.

    A kernel defined only on sequence ratios (gspo) is compared through its token twin (grpo).
    """
    kwargs = loss_config.policy_loss_kwargs()
    kwargs.pop("importance_sampling_level")
    kwargs["loss_type"] = token_level_kernel(kwargs["loss_type"])
    return kwargs


def seen_log_ratio(logp: torch.Tensor, behavior_logp: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """log(pi / b) per token as the loss used it (:func:`~sapo_lab.objective.losses.level_log_ratio`), detached."""
    valid = mask.bool()
    return level_log_ratio(torch.where(valid, logp.detach() - behavior_logp, torch.zeros_like(behavior_logp)), valid, level)


def comparison_due(step: int, k: int, cfg) -> bool:
    """Whether minibatch ``k`` of rollout step ``step`` (1-based) measures the gradient comparison: every
    ``gradient_comparison_every`` steps, on the last minibatch, the stalest (M - 1 optimizer steps old) and
    the one where token- and sequence-level gradients can differ at all (at r = 1 they coincide)."""
    every, last = cfg.evaluation.gradient_comparison_every, cfg.optimization.steps_per_generation - 1
    return every > 0 and step % every == 0 and k == last


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
    """The factor that turns the loss over the kept rows (a boolean or index tensor) into the full minibatch's
    normalisation."""
    kept = keep.nonzero().squeeze(1) if keep.dtype == torch.bool else keep
    if aggregation == "per_response":
        return float(kept.numel()) / mb.advantages.numel()
    cm = mb.completion_mask
    return float(cm.index_select(0, kept).sum()) / float(cm.sum())


@dataclass
class Forward:
    """A minibatch's forward pass and loss, before the backward; ``mb is None``: every advantage was 0."""

    mb: MiniBatch | None  # the rows that are trained
    logp: torch.Tensor | None = None  # (rows, tokens), with the graph
    loss: torch.Tensor | None = None  # the minimized scalar
    out: PolicyLossOutput | None = None
    kl: torch.Tensor | None = None
    scale: float = 1.0  # the zero-advantage rescaling already in ``loss``


def minibatch_forward(model, mb: MiniBatch, cfg, *, timer: ModelTimer, where: str) -> Forward:
    """Teacher-forced log-probs at the sampling temperature, the policy loss and the KL term; ``where`` labels a divergence."""
    o, lc = cfg.optimization, cfg.loss
    scale = 1.0
    if o.skip_zero_advantage and o.beta == 0:
        keep = (mb.advantages != 0).nonzero().squeeze(1)  # the kept rows' indices, found once
        scale = zero_advantage_scale(mb, keep, lc.aggregation)
        if keep.numel() == 0:
            return Forward(mb=None)
        mb = mb.select(keep)
    if not all(m.training for m in model.modules()):  # model.train() costs ~4x this check; sampling restores the mode
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
    return Forward(mb=mb, logp=logp, loss=loss, out=out, kl=kl, scale=scale)


def compare_gradients(model, forward: Forward, loss_config) -> tuple[dict | None, float]:
    """``(tokseq_* keys, wall seconds)`` of the token- versus sequence-level gradient comparison on ``forward``'s
    minibatch; ``(None, 0.0)`` when nothing was trained. Reads the graph, leaves ``.grad`` alone."""
    if forward.mb is None:
        return None, 0.0
    t0 = time.perf_counter()
    mb = forward.mb
    comparison = token_sequence_gradient_comparison(
        forward.logp, mb.behavior_logp, mb.advantages, mb.completion_mask, params=list(model.parameters()),
        loss_scale=forward.scale, **comparison_kwargs(loss_config))
    return comparison, time.perf_counter() - t0


def optimizer_step(model, optimizer, forward: Forward, cfg, *, lr: float, timer: ModelTimer, where: str) -> UpdateResult:
    """Set the LR, backpropagate ``forward.loss``, clip and step; ``where`` labels a divergence."""
    o, lc = cfg.optimization, cfg.loss
    for group in optimizer.param_groups:
        group["lr"] = lr
    if forward.mb is None:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        return UpdateResult(loss=0.0, grad_norm=0.0, tokens_trained=0, lr=lr)
    mb, logp, loss, kl = forward.mb, forward.logp, forward.loss, forward.kl
    mask = mb.completion_mask
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
        stats=forward.out.stats,
        kl_ref=None if kl is None else float(kl.detach()),
        log_ratio=seen_log_ratio(logp, mb.behavior_logp, mask, lc.resolved_importance_sampling_level()),
        mask=mask,
        advantages=mb.advantages,
        lr=lr,
    )


def minibatch_update(model, optimizer, mb: MiniBatch, cfg, *, lr: float, timer: ModelTimer, where: str) -> UpdateResult:
    """:func:`minibatch_forward` then :func:`optimizer_step`: one update of ``mb`` at learning rate ``lr``."""
    forward = minibatch_forward(model, mb, cfg, timer=timer, where=where)
    return optimizer_step(model, optimizer, forward, cfg, lr=lr, timer=timer, where=where)
