"""The same SAPO run on Hugging Face TRL: one declared config mapping, a reward function, a dataset.

Tested against TRL 1.16 (``requirements-trl.txt``). TRL and ``datasets`` are imported only
inside the functions that need them: the declared tables (:data:`MAPPING`, :data:`REFUSALS`,
:data:`FIXED`, :data:`DIFFERENCES`) are plain Python, so the book renders them without TRL.

Every leaf of :class:`sapo_lab.runs.config.TrainConfig` has exactly one row in :data:`MAPPING`:
``mapped`` (a ``GRPOConfig`` field, converted as the note says), ``script`` (used by the
exported ``train_trl.py``, not by ``GRPOConfig``) or ``dropped`` (with the reason). A value
TRL cannot reproduce is refused (:data:`REFUSALS`), never silently changed.

What TRL 1.16 computes (``GRPOTrainer._compute_loss``, read from the installed source):
``loss_type="sapo"`` uses the per-token loss ``-A * (4/tau) * sigmoid(tau (r - 1))`` with
``tau = sapo_temperature_pos`` where ``A > 0`` else ``sapo_temperature_neg``; ``"grpo"`` uses
``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)``; both then take each response's mean over its
tokens and the mean over *all* responses of the micro-batch, divided by the gradient
accumulation steps. ``importance_sampling_level="sequence"`` replaces the token log ratio by
the response's mean log ratio. That is ``sapo_lab.policy_loss`` with ``aggregation=
"per_response"`` up to the two differences in :data:`DIFFERENCES` (tests/integrations/test_trl_equivalence.py).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from ..objective.registry import KERNELS

logger = logging.getLogger("sapo_lab.trl")

TESTED_TRL_VERSION = "1.16"
PROMPT_FORMATS = ("plain", "chat")


@dataclass(frozen=True)
class FieldMapping:
    """One sapo_lab config key and where it goes in TRL."""

    key: str  # dotted sapo_lab key
    trl: str  # GRPOConfig field(s), or what in train_trl.py uses it; "" when dropped
    how: str  # "mapped" | "script" | "dropped"
    note: str  # the conversion, or why it is dropped
    convert: Callable | None = None  # (cfg, num_processes) -> {GRPOConfig field: value}; only for "mapped"


def _k(cfg) -> int:
    return cfg.optimization.steps_per_generation


def per_device_batch_size(cfg, num_processes: int = 1) -> int:
    """Responses per process per optimizer step: prompts_per_rollout * G / (M * processes).

    sapo_lab splits one rollout batch into M minibatches, one optimizer step each; with
    gradient_accumulation_steps = 1 TRL's optimizer step sees per_device * processes responses.
    """
    if num_processes < 1:
        raise ValueError(f"num_processes must be >= 1, got {num_processes}")
    n = cfg.rollout.prompts_per_rollout * cfg.rollout.num_generations
    if n % (_k(cfg) * num_processes):
        raise ValueError(
            f"rollout.prompts_per_rollout * rollout.num_generations = {n} responses must split evenly into "
            f"optimization.steps_per_generation ({_k(cfg)}) x processes ({num_processes}) for TRL"
        )
    return n // (_k(cfg) * num_processes)


def trl_loss_type(cfg) -> str:
    """TRL's ``loss_type`` for sapo_lab's (loss_type, aggregation): the kernel's registry row (None: refused)."""
    kernel = KERNELS[cfg.loss.loss_type]
    return kernel.trl_token_pool_loss_type if cfg.loss.aggregation == "token_pool" else kernel.trl_loss_type


def _loss_type_note() -> str:
    """The loss_type row's note, read off the registry: what each kernel becomes in TRL."""
    mapped, refused = [], []
    for k in KERNELS.values():
        if k.trl_loss_type is None:
            refused.append(k.name)
            continue
        at = f" at {k.default_level} level" if k.levels == (k.default_level,) else ""
        pool = f" ({k.trl_token_pool_loss_type} with token_pool)" if k.trl_token_pool_loss_type else ""
        mapped.append(f"{k.name} -> {k.trl_loss_type}{at}{pool}")
    return ", ".join(mapped) + (f"; {', '.join(refused)}: refused (no TRL equivalent)" if refused else "")


def _on_cuda(cfg) -> bool:
    if cfg.device == "cpu":
        return False
    import torch

    return torch.cuda.is_available()


def _same(name: str, section: str) -> Callable:
    return lambda cfg, n: {name: getattr(getattr(cfg, section), name)}


_RESULTS = (
    "held-out Pass@1 is measured after training by sapo_lab's own evaluator (`python -m sapo_lab eval --model OUT/final_model`)"
)

MAPPING: tuple[FieldMapping, ...] = (
    FieldMapping("model.name_or_path", "GRPOTrainer(model=...)", "script",
                 "a Hugging Face directory or hub name is loaded as is; "
                 "a sapo_lab size name is built and cold-started by sapo_lab first"),
    *(FieldMapping(f"task.{k}", "train_dataset", "script", "the frozen splits; the train split becomes the dataset (to_dataset)")
      for k in ("name", "options", "split_seed", "num_train", "num_dev", "num_eval")),
    *(FieldMapping(f"cold_start.{k}", "sapo_lab cold start", "script",
                   "used only when the model is a sapo_lab size name: the same cached cold start as `sapo_lab train`")
      for k in ("max_updates", "batch_size", "sft_learning_rate", "target_pass1", "eval_every", "cache_dir")),
    FieldMapping("rollout.prompts_per_rollout", "per_device_train_batch_size", "mapped",
                 "prompts_per_rollout * num_generations / (steps_per_generation * processes); "
                 "TRL's generation batch is then one sapo_lab rollout batch",
                 lambda cfg, n: {"per_device_train_batch_size": per_device_batch_size(cfg, n)}),
    FieldMapping("rollout.num_generations", "num_generations", "mapped", "same", _same("num_generations", "rollout")),
    FieldMapping("rollout.max_completion_length", "max_completion_length", "mapped", "same (EOS counts as a token in both)",
                 _same("max_completion_length", "rollout")),
    FieldMapping("rollout.temperature", "temperature", "mapped",
                 "same; both also divide the teacher-forced logits by it", _same("temperature", "rollout")),
    FieldMapping("optimization.max_steps", "max_steps", "mapped",
                 "rollout steps x steps_per_generation (TRL counts optimizer steps)",
                 lambda cfg, n: {"max_steps": cfg.optimization.max_steps * _k(cfg)}),
    FieldMapping("optimization.steps_per_generation", "steps_per_generation", "mapped",
                 "M: same, with num_iterations=1 and gradient_accumulation_steps=1 (see FIXED)",
                 _same("steps_per_generation", "optimization")),
    FieldMapping("optimization.learning_rate", "learning_rate", "mapped", "same", _same("learning_rate", "optimization")),
    FieldMapping("optimization.lr_scheduler_type", "lr_scheduler_type", "mapped", "same names",
                 _same("lr_scheduler_type", "optimization")),
    FieldMapping("optimization.warmup_steps", "warmup_steps", "mapped", "same (optimizer steps in both)",
                 _same("warmup_steps", "optimization")),
    FieldMapping("optimization.weight_decay", "weight_decay", "mapped", "same (AdamW)", _same("weight_decay", "optimization")),
    FieldMapping("optimization.adam_beta1", "adam_beta1", "mapped", "same", _same("adam_beta1", "optimization")),
    FieldMapping("optimization.adam_beta2", "adam_beta2", "mapped", "same", _same("adam_beta2", "optimization")),
    FieldMapping("optimization.max_grad_norm", "max_grad_norm", "mapped", "same (0 = no clipping in both)",
                 _same("max_grad_norm", "optimization")),
    FieldMapping("optimization.beta", "beta", "mapped",
                 "same k3 estimator to the initial model, averaged per response", _same("beta", "optimization")),
    FieldMapping("optimization.skip_zero_advantage", "", "dropped",
                 "a compute saving with an identical update (tested in sapo_lab); TRL always runs every response"),
    FieldMapping("loss.loss_type", "loss_type", "mapped", _loss_type_note(),
                 lambda cfg, n: {"loss_type": trl_loss_type(cfg)}),
    FieldMapping("loss.sapo_temperature_pos", "sapo_temperature_pos", "mapped", "same (tau_pos)",
                 _same("sapo_temperature_pos", "loss")),
    FieldMapping("loss.sapo_temperature_neg", "sapo_temperature_neg", "mapped", "same (tau_neg)",
                 _same("sapo_temperature_neg", "loss")),
    FieldMapping("loss.epsilon", "epsilon", "mapped", "same (clip losses only)", _same("epsilon", "loss")),
    FieldMapping("loss.epsilon_high", "epsilon_high", "mapped", "same; null becomes epsilon explicitly",
                 lambda cfg, n: {"epsilon_high": cfg.loss.epsilon if cfg.loss.epsilon_high is None else cfg.loss.epsilon_high}),
    FieldMapping("loss.importance_sampling_level", "importance_sampling_level", "mapped",
                 "same; null resolved as sapo_lab does (the kernel's default: sequence for gspo, else token)",
                 lambda cfg, n: {"importance_sampling_level": cfg.loss.resolved_importance_sampling_level()}),
    FieldMapping("loss.aggregation", "loss_type", "mapped",
                 "per_response is TRL's sapo/grpo normalisation; token_pool is bnpo (clip losses only)",
                 lambda cfg, n: {"loss_type": trl_loss_type(cfg)}),
    FieldMapping("loss.max_log_ratio", "", "dropped",
                 "a diagnostic threshold under max_log_ratio_policy='record'; TRL does not count such tokens"),
    FieldMapping("loss.max_log_ratio_policy", "", "dropped",
                 "'record' changes no update, so dropping it is exact; 'skip' and 'error' are refused"),
    *(FieldMapping(f"evaluation.{k}", "", "dropped", _RESULTS)
      for k in ("dev_every", "dev_prompts", "num_samples", "pass_k", "eval_temperature", "greedy",
                "gradient_comparison_every")),
    FieldMapping("seed", "seed", "mapped", "same number; the random streams differ, so runs are not bit-identical",
                 lambda cfg, n: {"seed": cfg.seed}),
    FieldMapping("device", "use_cpu, bf16", "mapped",
                 "'cpu' -> use_cpu=True; 'auto'/'cuda' -> accelerate places each process; "
                 "bf16 autocast exactly where sapo_lab uses it (on CUDA)",
                 lambda cfg, n: {"use_cpu": cfg.device == "cpu", "bf16": _on_cuda(cfg)}),
    FieldMapping("save_steps", "save_steps", "mapped", "rollout steps x steps_per_generation",
                 lambda cfg, n: {"save_steps": cfg.save_steps * _k(cfg)}),
    FieldMapping("max_train_time_s", "train_trl.py time-limit callback", "script",
                 "TRL has no wall-clock guard; the exported script stops training after it (0 = no limit)"),
    FieldMapping("threads", "torch.set_num_threads", "script", "set by the exported script (0 = torch's default)"),
)

# GRPOConfig settings that sapo_lab's algorithm implies (TRL's defaults differ for some).
FIXED: dict = {
    "num_iterations": 1,  # each response is trained in exactly one of the M minibatches
    "gradient_accumulation_steps": 1,  # one minibatch = one optimizer step, as in sapo_lab
    "scale_rewards": "group",  # group-relative advantages (see DIFFERENCES for the std)
    "top_k": 0,  # plain sampling at `temperature`, as sapo_lab's rollout
    "top_p": 1.0,
    "repetition_penalty": 1.0,
    "mask_truncated_completions": False,  # sapo_lab trains truncated responses with reward 0
    "disable_dropout": True,  # sapo_lab's models have no dropout
    "remove_unused_columns": False,  # the reward function reads the problem's columns
    "save_strategy": "steps",
    "report_to": "none",
    "log_completions": False,
}

# Values TRL cannot reproduce: (key, test on the config, reason).
REFUSALS: tuple[tuple[str, Callable, str], ...] = (
    ("loss.loss_type", lambda cfg: KERNELS[cfg.loss.loss_type].trl_loss_type is None,
     "TRL has no loss_type with this kernel's gate (" + ", ".join(k.name for k in KERNELS.values()
                                                               if k.trl_loss_type is None) + ")"),
    ("loss.aggregation", lambda cfg: cfg.loss.aggregation == "token_pool" and trl_loss_type(cfg) is None,
     "TRL pools tokens (bnpo) only for the clip losses; its loss_type='sapo' always averages per response"),
    ("loss.max_log_ratio_policy", lambda cfg: cfg.loss.max_log_ratio_policy != "record",
     "TRL cannot skip or refuse tokens beyond max_log_ratio; use 'record' to export"),
)

# Where the two implementations differ on purpose, and what each difference does.
DIFFERENCES: tuple[dict, ...] = (
    {
        "topic": "empty responses",
        "sapo_lab": "the batch mean is over non-empty responses (N)",
        "trl": "the batch mean is over all B responses of the micro-batch",
        "effect": "TRL's gradient is N/B times sapo_lab's when some response has no valid token; identical otherwise. "
        "TRL has no option for this; a response always holds at least its EOS or its truncated tokens in both trainers",
    },
    {
        "topic": "reported SAPO loss",
        "sapo_lab": "centred surrogate (4/tau)(sigmoid(tau(r-1)) - 1/2), zero at r = 1",
        "trl": "uncentred surrogate (4/tau) sigmoid(tau(r-1))",
        "effect": "the losses differ by the constant mean of 2A/tau (per-response weighted); the gradients are identical",
    },
    {
        "topic": "advantage scale",
        "sapo_lab": "(R - mean) / (population std + 1e-6)",
        "trl": "(R - mean) / (sample std with Bessel's correction + 1e-4)",
        "effect": "TRL's advantages are about sqrt((G-1)/G) times sapo_lab's: a uniform scale that Adam "
        "almost removes, but that gradient clipping and the KL weight see. TRL has no population-std option",
    },
    {
        "topic": "behavior log-probs",
        "sapo_lab": "taken from the sampling pass itself",
        "trl": "recomputed by a separate forward pass when steps_per_generation > gradient_accumulation_steps",
        "effect": "the same numbers up to floating-point noise (dropout is off in both); TRL spends one more forward",
    },
    {
        "topic": "overflowing ratios",
        "sapo_lab": "SAPO's gradient r w(r) is evaluated in log space: an overflowing ratio gets exactly 0",
        "trl": "sigmoid(tau(exp(z) - 1)) in plain arithmetic",
        "effect": "identical for |log r| below roughly 80 in float32; beyond, TRL's gradient can become NaN",
    },
)


def mapping_rows() -> list[dict]:
    """The declared mapping as plain rows (key, trl, how, note), for tables."""
    return [{"key": m.key, "trl": m.trl, "how": m.how, "note": m.note} for m in MAPPING]


def check_supported(cfg) -> None:
    """Raise ``ValueError`` naming the first config value TRL cannot reproduce."""
    for key, refused, reason in REFUSALS:
        if refused(cfg):
            section, _, leaf = key.rpartition(".")
            value = getattr(getattr(cfg, section) if section else cfg, leaf)
            raise ValueError(f"config key {key!r} = {value!r} cannot be exported to TRL: {reason}")


# TRL's default when use_vllm=True (GRPOConfig.vllm_importance_sampling_correction, TRL 1.16).
_VLLM_IS_DEFAULT = True
TRUNCATED_SAMPLING_WITH_VLLM_IS = (
    "with vLLM importance-sampling correction the per-token weight divides by the truncated sampler's "
    "probability, so it carries the probability mass the truncation kept, not only the policy change "
    "(TRL issue #6789): sample untruncated (top_p=1, top_k=0, min_p unset) or set "
    "vllm_importance_sampling_correction=False"
)


def _truncation(kwargs: dict) -> str:
    """The first sampling setting in ``kwargs`` that truncates the distribution (``generation_kwargs`` win, as in
    TRL), as ``'top_p=0.9'``; ``''`` when sampling is untruncated."""
    merged = {**kwargs, **(kwargs.get("generation_kwargs") or {})}
    top_p, top_k, min_p = merged.get("top_p", 1.0), merged.get("top_k", 0), merged.get("min_p")
    if top_p is not None and top_p < 1:
        return f"top_p={top_p!r}"
    if top_k is not None and top_k > 0:
        return f"top_k={top_k!r}"
    if min_p:
        return f"min_p={min_p!r}"
    return ""


def check_sampling(kwargs: dict) -> None:
    """Raise ``ValueError`` in one line when ``GRPOConfig`` keyword arguments combine vLLM's importance-sampling
    correction with truncated sampling (top-p < 1, top-k or min-p): TRL's per-token weight is then biased."""
    if not kwargs.get("use_vllm"):
        return
    if not kwargs.get("vllm_importance_sampling_correction", _VLLM_IS_DEFAULT):
        return
    truncation = _truncation(kwargs)
    if truncation:
        raise ValueError(f"{truncation} cannot be exported to TRL with use_vllm=True: {TRUNCATED_SAMPLING_WITH_VLLM_IS}")


def grpo_config_kwargs(cfg, num_processes: int = 1) -> dict:
    """The ``GRPOConfig`` keyword arguments for ``cfg``: :data:`FIXED`, then each mapped row of :data:`MAPPING`."""
    check_supported(cfg)
    kwargs = dict(FIXED)
    for m in MAPPING:
        if m.how == "mapped":
            kwargs.update(m.convert(cfg, num_processes))
    return kwargs


def to_grpo_config(cfg, num_processes: int | None = None, **overrides):
    """A ``trl.GRPOConfig`` for ``cfg``; ``overrides`` are extra ``GRPOConfig`` fields (``output_dir=...``).

    ``num_processes`` defaults to the launcher's ``WORLD_SIZE`` (1 without one). An override
    of a mapped field wins, which is the caller's explicit choice; truncated sampling with vLLM's
    importance-sampling correction is refused (:func:`check_sampling`).
    """
    if num_processes is None:
        num_processes = int(os.environ.get("WORLD_SIZE", "1"))
    kwargs = {**grpo_config_kwargs(cfg, num_processes), **overrides}
    check_sampling(kwargs)
    from trl import GRPOConfig

    return GRPOConfig(**kwargs)


# ---------------------------------------------------------------- task adapter


def default_task(cfg=None):
    """The configured task object (``sapo_lab.tasks.task_for``); without a config, the default addition task."""
    from ..tasks import make_task, task_for

    return make_task("addition") if cfg is None else task_for(cfg)


def _problem_class(task):
    cls = getattr(task, "Problem", None)
    if cls is None:
        from ..tasks import Problem as cls
    return cls


def problem_to_row(problem, prompt_format: str = "plain") -> dict:
    """One dataset row: the prompt in TRL's plain or conversational form, then every problem field."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")
    fields = dataclasses.asdict(problem)
    prompt = fields["prompt"] if prompt_format == "plain" else [{"role": "user", "content": fields["prompt"]}]
    return {**{f"problem_{k}": v for k, v in fields.items()}, "prompt": prompt}


def to_dataset(split, prompt_format: str = "plain"):
    """A ``datasets.Dataset`` of one frozen split (a list of problems) for ``GRPOTrainer``."""
    from datasets import Dataset

    if not split:
        raise ValueError("the split is empty")
    return Dataset.from_list([problem_to_row(p, prompt_format) for p in split])


def _completion_text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return completion[-1].get("content", "")  # conversational: the assistant message
    raise ValueError(f"unexpected completion format {type(completion).__name__}")


class VerifierReward:
    """TRL reward function that calls the task's verifier; counts and logs the verdicts.

    ``finished`` (EOS produced in time) is read from ``completion_ids``: TRL cuts a
    completion after its EOS, so a finished one ends with an EOS id.
    """

    def __init__(self, task=None, eos_token_ids=()):
        self.task = task if task is not None else default_task()
        self.verify = self.task.verify
        self.problem_cls = _problem_class(self.task)
        self.eos_token_ids = {int(e) for e in ([eos_token_ids] if isinstance(eos_token_ids, int) else eos_token_ids)}
        if not self.eos_token_ids:
            raise ValueError("eos_token_ids is empty: the verifier needs to know whether EOS was produced")
        self.reasons: collections.Counter = collections.Counter()
        self.__name__ = "sapo_lab_verifier"  # TRL names its reward metrics after the function

    def __call__(self, prompts, completions, completion_ids, log_metric=None, **columns) -> list[float]:
        names = [f.name for f in dataclasses.fields(self.problem_cls)]
        missing = [n for n in names if f"problem_{n}" not in columns]
        if missing:
            raise ValueError(f"dataset columns problem_{missing[0]} missing: build the dataset with to_dataset")
        rewards, batch_reasons = [], collections.Counter()
        for i, (completion, ids) in enumerate(zip(completions, completion_ids, strict=True)):
            problem = self.problem_cls(**{n: columns[f"problem_{n}"][i] for n in names})
            finished = len(ids) > 0 and int(ids[-1]) in self.eos_token_ids
            reward, reason = self.verify(_completion_text(completion), finished, problem)
            rewards.append(float(reward))
            batch_reasons[reason] += 1
        self.reasons.update(batch_reasons)
        logger.info("verifier: %s", ", ".join(f"{k}={v}" for k, v in sorted(batch_reasons.items())))
        if log_metric is not None:
            for reason, count in batch_reasons.items():
                log_metric(f"verifier/{reason}", count / len(rewards))
        return rewards


def reward_function(task=None, eos_token_ids=(1,)) -> VerifierReward:
    """TRL reward function ``f(prompts, completions, completion_ids, **columns) -> [reward]`` from the task's verifier.

    ``task``: an object with ``verify(completion_text, finished, problem) -> (reward, reason)``
    (the Task protocol), default :func:`default_task`. ``eos_token_ids``: the tokenizer's EOS id(s).
    """
    return VerifierReward(task, eos_token_ids)
