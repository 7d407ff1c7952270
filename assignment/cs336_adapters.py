"""Stanford CS336 assignment 5 (spring 2026 edition) adapters with SAPO added: a drop-in for its ``tests/adapters.py``.

Copy this file over the course's ``tests/adapters.py`` (``assignment/cs336_adapters_2025.py`` for the 2025
edition), keeping the course's own filled-in adapters under another name. It defines every adapter name of that
edition, with its signature, so the course's test modules import; what each answers with:

* SAPO, from the student's SAPO assignment module (``SAPO_ASSIGNMENT``: its path; default the skeleton next to
  this file): ``importance_reweighting_method="sapo"`` (with ``tau_pos`` and ``tau_neg``) is the student's own
  ``sapo_loss`` evaluated on each token, so its temperature choice, sign, gate and detach are what the course's
  tests see; the group normalisation with ``baseline="mean"`` and ``advantage_normalizer="std"`` is the student's
  ``group_advantages``, with the standard deviation chosen by ``std``: ``"sample"`` (divided by G - 1,
  ``torch.std``'s default, which the course's snapshot expects; the default here) or ``"population"`` (divided
  by G, the SAPO assignment's part 1), both through the student's function.
* Everything else, from the course's own code when ``CS336_COURSE_ADAPTERS`` names its filled-in adapters file
  (the function of the same name there is called with the same arguments); without it, the methods sapo_lab
  defines come from sapo_lab (``"none"``, ``"noclip"``, ``"grpo"`` and ``"gspo"`` per-token losses, the
  ``"sequence"`` and ``"constant"`` aggregations), and the rest (tokenising, log-probs, rewards, the other
  normalisations, the training step, SFT, DPO, data and parsing) raise NotImplementedError in one line naming
  that variable.

Nothing is imported from the course's repository; the names and signatures follow its published interface.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch

HERE = Path(__file__).resolve().parent
STD_CONVENTIONS = ("sample", "population")
COURSE_ONLY_2026 = ("run_tokenize_prompt_and_output", "run_get_response_log_probs", "run_compute_rollout_rewards",
                    "run_grpo_train_step", "get_packed_sft_dataset", "run_iterate_batches", "run_parse_mmlu_response",
                    "run_parse_gsm8k_response", "run_compute_per_instance_dpo_loss")
_loaded: dict = {}


def _load(path: str, name: str, variable: str):
    """The module at ``path`` (named by the environment variable ``variable``), loaded once per path."""
    key = (name, str(Path(path).resolve()))
    if key not in _loaded:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{variable}={path}: no such file (set {variable} to your module's .py file)")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{variable}={path}: not a Python module (set {variable} to a .py file)")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[key] = module
    return _loaded[key]


def student():
    """The student's SAPO assignment module (``SAPO_ASSIGNMENT``, default ``assignment/sapo_assignment.py``)."""
    return _load(os.environ.get("SAPO_ASSIGNMENT", str(HERE / "sapo_assignment.py")), "sapo_assignment_for_cs336",
                 "SAPO_ASSIGNMENT")


def course_function(name: str) -> Callable | None:
    """The course's own ``name`` from the file ``CS336_COURSE_ADAPTERS`` names, or None when it is unset."""
    path = os.environ.get("CS336_COURSE_ADAPTERS")
    if not path:
        return None
    fn = getattr(_load(path, "cs336_course_adapters", "CS336_COURSE_ADAPTERS"), name, None)
    if not callable(fn):
        raise NotImplementedError(f"{name}: not defined in the course's adapters ({path})")
    return fn


def course_only(name: str) -> Callable:
    """An adapter the SAPO assignment does not define: the course's own, called with the same arguments."""

    def adapter(*args, **kwargs):
        fn = course_function(name)
        if fn is None:
            raise NotImplementedError(f"{name}: not part of the SAPO assignment; set CS336_COURSE_ADAPTERS to the "
                                      "course's own filled-in adapters file")
        return fn(*args, **kwargs)

    adapter.__name__ = adapter.__qualname__ = name
    adapter.__doc__ = f"CS336's ``{name}``, answered by the course's own adapters (CS336_COURSE_ADAPTERS)."
    return adapter


def student_group_advantages(grouped: torch.Tensor, advantage_eps: float, std: str) -> torch.Tensor:
    """(P, G) rewards -> advantages by the student's ``group_advantages``, with the sample or population std: for a
    group scaled by k = sqrt(G / (G - 1)), group_advantages(k R) / k = (R - mean) / (k * population std + eps)
    = (R - mean) / (sample std + eps)."""
    if std not in STD_CONVENTIONS:
        raise ValueError(f"std must be one of {STD_CONVENTIONS}, got {std!r}")
    if std == "population":
        return student().group_advantages(grouped, advantage_eps)
    size = grouped.shape[-1]
    if size < 2:
        raise ValueError("the sample standard deviation needs groups of at least 2")
    k = math.sqrt(size / (size - 1))
    return student().group_advantages(grouped * k, advantage_eps) / k


def student_sapo_per_token(advantages, policy_log_probs, old_log_probs, tau_pos: float, tau_neg: float):
    """(batch, seq) per-token SAPO loss: the student's ``sapo_loss`` on each token as a one-token response (one
    call per token: meant for tests, not for training)."""
    if old_log_probs is None:
        raise ValueError("sapo needs old_log_probs")
    adv = advantages.reshape(-1).to(policy_log_probs.dtype)
    one = torch.ones(1, 1, dtype=policy_log_probs.dtype, device=policy_log_probs.device)
    loss = student().sapo_loss
    return torch.stack([
        torch.stack([loss(policy_log_probs[i:i + 1, t:t + 1], old_log_probs[i:i + 1, t:t + 1], adv[i:i + 1], one,
                          tau_pos, tau_neg).reshape(()) for t in range(policy_log_probs.shape[1])])
        for i in range(policy_log_probs.shape[0])])


def _lower_eps(cliprange: float, ratio: torch.Tensor) -> float:
    """The lower clip epsilon for sapo_lab, which requires eps_low < 1: CS336 accepts cliprange >= 1 (its tests use
    10), whose lower bound 1 - cliprange <= 0 never binds on a positive ratio; half the smallest ratio does the same
    within sapo_lab's range."""
    if cliprange < 1:
        return cliprange
    smallest = float(ratio.detach().min().clamp(min=torch.finfo(ratio.dtype).tiny))
    return 1.0 - smallest / 2


def library_per_token_loss(method: str, advantages, policy_log_probs, old_log_probs, cliprange, response_mask):
    """(batch, seq) per-token loss of a method sapo_lab defines: "none" -A log pi, "noclip" -A r, "grpo"
    -min(r A, clip(r) A) per token, "gspo" the same with the response's length-normalised sequence ratio
    (sapo_lab's ``level_log_ratio``), written at every position of its row."""
    from sapo_lab.objective.clip import ppo_clip_surrogate
    from sapo_lab.objective.losses import level_log_ratio

    adv = advantages.reshape(-1, 1).to(policy_log_probs.dtype)
    if method == "none":
        return -adv * policy_log_probs
    if old_log_probs is None:
        raise ValueError(f"{method} needs old_log_probs")
    log_ratio = policy_log_probs - old_log_probs
    if method == "noclip":
        return -adv * torch.exp(log_ratio)
    if cliprange is None:
        raise ValueError(f"{method} needs cliprange")
    if method == "grpo":
        ratio = torch.exp(log_ratio)
        return -ppo_clip_surrogate(ratio, adv, _lower_eps(cliprange, ratio), cliprange)
    if method == "gspo":
        if response_mask is None:
            raise ValueError("gspo needs response_mask")
        valid = response_mask.bool()
        per_token = level_log_ratio(torch.where(valid, log_ratio, torch.zeros_like(log_ratio)), valid, "sequence")
        sequence = per_token.sum(-1, keepdim=True) / valid.sum(-1, keepdim=True).clamp(min=1)
        ratio = torch.exp(sequence)
        return -ppo_clip_surrogate(ratio, adv, _lower_eps(cliprange, ratio), cliprange).expand_as(policy_log_probs)
    raise ValueError(f"unknown method {method!r}")


# ---- the 2026 edition's adapters --------------------------------------------------------------------------
for _name in COURSE_ONLY_2026:
    globals()[_name] = course_only(_name)


def run_compute_group_normalized_rewards(
    raw_rewards: torch.Tensor,
    group_size: int,
    baseline: Literal["mean", "none"] = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: Literal["std", "none", "mean"] = "std",
    std: Literal["sample", "population"] = "sample",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Flat rewards (rollout_batch_size,) -> flat advantages. GRPO's setting (mean, std) is the student's
    ``group_advantages`` with ``std``'s convention; the other settings are the course's own."""
    if (baseline, advantage_normalizer) != ("mean", "std"):
        fn = course_function("run_compute_group_normalized_rewards")
        if fn is None:
            raise NotImplementedError(f"baseline={baseline!r} with advantage_normalizer={advantage_normalizer!r} is "
                                      "not part of the SAPO assignment; set CS336_COURSE_ADAPTERS")
        return fn(raw_rewards, group_size, baseline, advantage_eps, advantage_normalizer)
    adv = student_group_advantages(raw_rewards.reshape(-1, group_size), advantage_eps, std).reshape(-1)
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
    """Per-token loss (batch, seq). ``"sapo"``: the student's ``sapo_loss`` on each token; the other methods: the
    course's own (CS336_COURSE_ADAPTERS), else sapo_lab's definitions."""
    method = importance_reweighting_method
    if method == "sapo":
        per_token = student_sapo_per_token(raw_rewards_or_advantages, policy_log_probs, old_log_probs, tau_pos,
                                           tau_neg)
        return per_token, {"ratio_mean": torch.exp(policy_log_probs - old_log_probs).detach().mean()}
    fn = course_function("run_compute_policy_gradient_loss")
    if fn is not None:
        return fn(raw_rewards_or_advantages, policy_log_probs, method, old_log_probs, cliprange, response_mask)
    per_token = library_per_token_loss(method, raw_rewards_or_advantages, policy_log_probs, old_log_probs, cliprange,
                                       response_mask)
    return per_token, {}


def run_aggregate_loss_across_microbatch(
    per_token_policy_gradient_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_normalization: Literal["sequence", "constant"] = "sequence",
    normalization_constant: int | None = None,
) -> torch.Tensor:
    """"sequence": each response's mean over its masked tokens, then the mean over responses (sapo_lab's
    per-response ``masked_mean``); "constant": the masked sum divided by ``normalization_constant``. The course's
    own when CS336_COURSE_ADAPTERS is set."""
    fn = course_function("run_aggregate_loss_across_microbatch")
    if fn is not None:
        return fn(per_token_policy_gradient_loss, mask, loss_normalization, normalization_constant)
    from sapo_lab.objective.masks import masked_mean

    if loss_normalization == "sequence":
        return masked_mean(per_token_policy_gradient_loss, mask, "per_response")
    if loss_normalization != "constant":
        raise ValueError(f"loss_normalization must be 'sequence' or 'constant', got {loss_normalization!r}")
    if normalization_constant is None:
        raise ValueError("loss_normalization='constant' needs normalization_constant")
    kept = mask.to(torch.bool)
    values = per_token_policy_gradient_loss
    return torch.where(kept, values, torch.zeros_like(values)).sum() / normalization_constant


__all__ = [*COURSE_ONLY_2026, "run_compute_group_normalized_rewards", "run_compute_policy_gradient_loss",
           "run_aggregate_loss_across_microbatch"]
NAMES_2026 = tuple(sorted(__all__))
