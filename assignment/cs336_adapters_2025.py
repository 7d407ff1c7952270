"""Stanford CS336 assignment 5 (spring 2025 edition) adapters with SAPO added: a drop-in for its ``tests/adapters.py``,
with ``cs336_adapters.py`` copied beside it as ``tests/cs336_adapters.py`` (what both editions share lives there).

The 2025 edition's names and signatures; what answers is as in ``cs336_adapters.py`` (the 2026 edition): SAPO and
the std-normalised group advantages from the student's SAPO assignment module (``SAPO_ASSIGNMENT``), everything
else from the course's own adapters (``CS336_COURSE_ADAPTERS``) or, for what sapo_lab defines, from sapo_lab.
``run_compute_policy_gradient_loss`` and ``run_grpo_microbatch_train_step`` take ``loss_type="sapo"`` with
``tau_pos`` and ``tau_neg``; ``run_compute_group_normalized_rewards`` takes ``std`` ("sample", this edition's
snapshot, or "population", the SAPO assignment's part 1).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

import torch

# What both editions share is in the 2026 file: copy it beside this one, under its own name (the handout says so).
_SHARED = Path(__file__).with_name("cs336_adapters.py")
if not _SHARED.is_file():
    raise ImportError(f"{Path(__file__).name} needs cs336_adapters.py beside it ({_SHARED} is missing): copy both "
                      "files of the repository's assignment/ folder, this one as tests/adapters.py and "
                      "cs336_adapters.py as tests/cs336_adapters.py")
_spec = importlib.util.spec_from_file_location("cs336_adapters_shared", _SHARED)
shared = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shared)

COURSE_ONLY_2025 = ("run_tokenize_prompt_and_output", "run_compute_entropy", "run_get_response_log_probs",
                    "run_masked_normalize", "run_sft_microbatch_train_step", "get_packed_sft_dataset",
                    "run_iterate_batches", "run_parse_mmlu_response", "run_parse_gsm8k_response",
                    "run_compute_per_instance_dpo_loss")
for _name in COURSE_ONLY_2025:
    globals()[_name] = shared.course_only(_name)
LOSS_TYPES = ("no_baseline", "reinforce_with_baseline", "grpo_clip", "sapo")


def run_compute_group_normalized_rewards(
    reward_fn,
    rollout_responses: list[str],
    repeated_ground_truths: list[str],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
    std: Literal["sample", "population"] = "sample",
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """(advantages, raw rewards, metadata) for the responses, ``reward_fn(response, truth)["reward"]`` each. With
    ``normalize_by_std`` the advantages are the student's ``group_advantages`` (``std``'s convention); without it
    (mean-centred only) they are the course's own."""
    if not normalize_by_std:
        fn = shared.course_function("run_compute_group_normalized_rewards")
        if fn is None:
            raise NotImplementedError("normalize_by_std=False is not part of the SAPO assignment; set "
                                      "CS336_COURSE_ADAPTERS")
        return fn(reward_fn, rollout_responses, repeated_ground_truths, group_size, advantage_eps, normalize_by_std)
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(f"{len(rollout_responses)} responses but {len(repeated_ground_truths)} ground truths")
    raw = torch.tensor([float(reward_fn(r, t)["reward"]) for r, t in zip(rollout_responses, repeated_ground_truths,
                                                                           strict=True)])
    adv = shared.student_group_advantages(raw.reshape(-1, group_size), advantage_eps, std).reshape(-1)
    return adv, raw, {"reward_mean": float(raw.mean()), "advantage_abs_mean": float(adv.abs().mean())}


def run_compute_naive_policy_gradient_loss(raw_rewards_or_advantages: torch.Tensor,
                                           policy_log_probs: torch.Tensor) -> torch.Tensor:
    """-A log pi per token (the course's own when CS336_COURSE_ADAPTERS is set)."""
    fn = shared.course_function("run_compute_naive_policy_gradient_loss")
    if fn is not None:
        return fn(raw_rewards_or_advantages, policy_log_probs)
    return shared.library_per_token_loss("none", raw_rewards_or_advantages, policy_log_probs, None, None, None)


def run_compute_grpo_clip_loss(advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                               cliprange: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """-min(r A, clip(r, 1 - eps, 1 + eps) A) per token (sapo_lab's ``ppo_clip_surrogate``; the course's own when
    CS336_COURSE_ADAPTERS is set)."""
    fn = shared.course_function("run_compute_grpo_clip_loss")
    if fn is not None:
        return fn(advantages, policy_log_probs, old_log_probs, cliprange)
    per_token = shared.library_per_token_loss("grpo", advantages, policy_log_probs, old_log_probs, cliprange, None)
    ratio = torch.exp(policy_log_probs - old_log_probs).detach()
    clipped = (ratio - ratio.clamp(1 - cliprange, 1 + cliprange)).abs() > 0
    return per_token, {"clipped": clipped}


def run_compute_policy_gradient_loss(
    policy_log_probs: torch.Tensor,
    loss_type: Literal["no_baseline", "reinforce_with_baseline", "grpo_clip", "sapo"],
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss (batch, seq): ``"sapo"`` the student's ``sapo_loss`` on each token (on ``advantages``); the
    others the course's own, else sapo_lab's definitions ("no_baseline" on the raw rewards, the other two on the
    advantages)."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if loss_type == "sapo":
        if advantages is None:
            raise ValueError("sapo needs advantages")
        per_token = shared.student_sapo_per_token(advantages, policy_log_probs, old_log_probs, tau_pos, tau_neg)
        return per_token, {}
    fn = shared.course_function("run_compute_policy_gradient_loss")
    if fn is not None:
        return fn(policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange)
    if loss_type == "no_baseline":
        return run_compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        return run_compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    return run_compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)


def run_masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over the masked elements (all of them when ``dim`` is None, else along ``dim``); the course's own when
    CS336_COURSE_ADAPTERS is set."""
    fn = shared.course_function("run_masked_mean")
    if fn is not None:
        return fn(tensor, mask, dim)
    m = mask.to(tensor.dtype)
    kept = torch.where(mask.bool(), tensor, torch.zeros_like(tensor))
    if dim is None:
        return kept.sum() / m.sum()
    return kept.sum(dim) / m.sum(dim)


def run_grpo_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    loss_type: Literal["no_baseline", "reinforce_with_baseline", "grpo_clip", "sapo"],
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One microbatch's loss (each response's masked mean, averaged over responses, divided by
    ``gradient_accumulation_steps``), backpropagated. ``"sapo"``: on the student's ``sapo_loss`` per token; the
    other loss types are the course's own."""
    if loss_type != "sapo":
        fn = shared.course_function("run_grpo_microbatch_train_step")
        if fn is None:
            raise NotImplementedError(f"loss_type={loss_type!r} in the training step is not part of the SAPO "
                                      "assignment; set CS336_COURSE_ADAPTERS")
        return fn(policy_log_probs, response_mask, gradient_accumulation_steps, loss_type, raw_rewards, advantages,
                  old_log_probs, cliprange)
    per_token, meta = run_compute_policy_gradient_loss(policy_log_probs, "sapo", raw_rewards, advantages,
                                                       old_log_probs, cliprange, tau_pos, tau_neg)
    loss = run_masked_mean(per_token, response_mask, dim=-1).mean() / gradient_accumulation_steps
    loss.backward()
    return loss.detach(), meta


__all__ = [*COURSE_ONLY_2025, "run_compute_group_normalized_rewards", "run_compute_naive_policy_gradient_loss",
           "run_compute_grpo_clip_loss", "run_compute_policy_gradient_loss", "run_masked_mean",
           "run_grpo_microbatch_train_step"]
NAMES_2025 = tuple(sorted(__all__))
