"""One dataclass tree for a run, saved as ``config.json`` next to it.

Field names follow TRL's ``GRPOConfig`` where it has an equivalent (``loss_type``,
``num_generations``, ``max_completion_length``, ``temperature``, ``learning_rate``,
``beta``, ``epsilon``/``epsilon_high``, ``importance_sampling_level``,
``steps_per_generation``, ``sapo_temperature_pos``/``sapo_temperature_neg``,
``max_grad_norm``, ``lr_scheduler_type``, ``warmup_steps``, ``max_steps``,
``save_steps``). ``sapo_temperature_pos/neg`` are the review's tau_pos / tau_neg.

Unknown keys and bad values raise ``ValueError`` naming the offending key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass, field

from ..objective.losses import IMPORTANCE_SAMPLING_LEVELS, MAX_LOG_RATIO_POLICIES
from ..objective.masks import AGGREGATIONS
from ..objective.registry import KERNELS, LOSS_TYPES, kernel_for, resolved_level
from ..tasks import make_task
from .durable import write_json

LR_SCHEDULES = ("constant", "constant_with_warmup", "linear", "cosine")


@dataclass
class ModelConfig:
    """The policy to start from."""

    name_or_path: str = "cpu-tiny"  # a size in sapo_lab.training.model.MODEL_SIZES, a directory, or a hub name


@dataclass
class TaskConfig:
    """Which task (see :mod:`sapo_lab.tasks`) and how many problems each frozen split holds."""

    name: str = "addition"  # a registered task name, or an import path "my_module:MyTask"
    options: dict = field(default_factory=dict)  # the task's constructor keyword arguments
    split_seed: int = 0  # the splits are frozen: independent of the run's seed
    num_train: int = 8000  # training prompts drawn for rollouts
    num_dev: int = 256  # development prompts: dev Pass@1 during training, checkpoint selection
    num_eval: int = 512  # untouched evaluation prompts: reported Pass@1 only


@dataclass
class ColdStartConfig:
    """Supervised warm start, stopped once sampled dev Pass@1 reaches ``target_pass1``."""

    max_updates: int = 3000  # 0 skips the cold start (e.g. for an already fine-tuned --model)
    batch_size: int = 64  # SFT examples per update
    sft_learning_rate: float = 2e-3  # AdamW learning rate of the warm start
    target_pass1: float = 0.3  # stop once sampled dev Pass@1 reaches this (rewards must not be all 0)
    eval_every: int = 20  # SFT updates between dev measurements
    cache_dir: str = "runs/_coldstart"  # "" disables the cache


@dataclass
class RolloutConfig:
    """Sampling of each rollout batch (Algorithm 1)."""

    prompts_per_rollout: int = 32  # prompts per rollout batch; responses = this * num_generations
    num_generations: int = 8  # G, responses per prompt
    max_completion_length: int = 5  # the addition answer is max_digits + 1 digits, then EOS
    temperature: float = 1.0  # sampling temperature of the rollouts (the behavior policy)


@dataclass
class OptimizationConfig:
    """The K minibatch updates per rollout batch (Algorithm 2) and the optimizer."""

    max_steps: int = 600  # rollout steps; each makes steps_per_generation optimizer steps
    steps_per_generation: int = 4  # K update minibatches per rollout batch (the paper's 4)
    learning_rate: float = 2e-4  # AdamW peak learning rate
    lr_scheduler_type: str = "constant_with_warmup"  # one of LR_SCHEDULES
    warmup_steps: int = 10  # optimizer steps
    weight_decay: float = 0.0  # AdamW decoupled weight decay
    adam_beta1: float = 0.9  # AdamW first-moment decay
    adam_beta2: float = 0.99  # AdamW second-moment decay
    max_grad_norm: float = 1.0  # 0 disables clipping (the norm is still logged)
    beta: float = 0.0  # KL coefficient to the cold-start reference; 0 = off, no reference kept
    # Responses with advantage 0 contribute exactly nothing to the policy gradient, so (when
    # beta = 0) they are left out of the forward/backward and the loss is rescaled to the full
    # minibatch's normalisation: the same update for less compute.
    skip_zero_advantage: bool = True


@dataclass
class LossConfig:
    """The policy loss, in TRL's names; :meth:`policy_loss_kwargs` maps them to :func:`sapo_lab.policy_loss`."""

    loss_type: str = "sapo"  # a kernel of sapo_lab.objective.registry (sapo, grpo, gspo, sapo_directional, gauss)
    sapo_temperature_pos: float = 1.0  # tau_pos: gate temperature for tokens with advantage > 0
    sapo_temperature_neg: float = 1.05  # tau_neg: gate temperature for tokens with advantage < 0
    epsilon: float = 0.2  # lower clip width of grpo/gspo (ratio floor 1 - epsilon)
    epsilon_high: float | None = None  # None: same as epsilon
    importance_sampling_level: str | None = None  # None: the kernel's default (sequence for gspo, token otherwise)
    aggregation: str = "per_response"  # one of sapo_lab.objective.masks.AGGREGATIONS: token averaging (also for the KL term)
    max_log_ratio: float = 20.0  # |log r| above this counts as extreme staleness
    max_log_ratio_policy: str = "record"  # what an extreme ratio does: one of MAX_LOG_RATIO_POLICIES

    def resolved_importance_sampling_level(self) -> str:
        """The level ``policy_loss`` uses: the configured one, else the kernel's default."""
        return resolved_level(self.loss_type, self.importance_sampling_level)

    def policy_loss_kwargs(self) -> dict:
        """The keyword arguments of :func:`sapo_lab.policy_loss` that this config sets: the one mapping."""
        return {
            "loss_type": self.loss_type,
            "tau_pos": self.sapo_temperature_pos,
            "tau_neg": self.sapo_temperature_neg,
            "clip_eps_low": self.epsilon,
            "clip_eps_high": self.epsilon if self.epsilon_high is None else self.epsilon_high,
            "importance_sampling_level": self.importance_sampling_level,
            "aggregation": self.aggregation,
            "max_log_ratio": self.max_log_ratio,
            "max_log_ratio_policy": self.max_log_ratio_policy,
        }


@dataclass
class EvaluationConfig:
    """Held-out evaluation and the per-step dev measurement."""

    dev_every: int = 10  # rollout steps between dev-subset Pass@1 measurements
    dev_prompts: int = 128  # dev prompts per dev measurement (one sample each)
    num_samples: int = 4  # n samples per held-out prompt for Pass@1 / pass@k
    pass_k: tuple[int, ...] = (1, 4)  # the k of the reported pass@k estimates (each <= num_samples)
    eval_temperature: float | None = None  # None: the rollout temperature
    greedy: bool = True  # held-out evaluation also reports greedy-decoding accuracy
    # Every this many rollout steps, the step's last (stalest) minibatch also computes the
    # token- and sequence-level gradients and their §9 decomposition (diagnostics.py): about
    # five extra backward passes, no change to the update or to any random stream. 0 = off.
    gradient_comparison_every: int = 10


@dataclass
class TrainConfig:
    """Everything that decides a run; saved as the run's ``config.json``."""

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    seed: int = 0  # model init, cold start, sampling and minibatch order
    device: str = "auto"  # "auto" = cuda if available, else cpu
    save_steps: int = 50  # checkpoint every N rollout steps (and on Ctrl-C)
    max_train_time_s: float = 0.0  # stop training after this wall time; 0 = no limit
    threads: int = 0  # torch CPU threads; 0 = torch's default

    def to_dict(self) -> dict:
        """The config as plain JSON values (what ``config.json`` holds)."""
        return dataclasses.asdict(self)

    def save(self, path: str) -> None:
        """Write ``config.json`` (keys sorted) atomically and fsynced."""
        write_json(path, self.to_dict(), sort_keys=True)


PRESETS: dict[str, dict] = {
    # One thread: a 1M-parameter model gains little from more, and on a shared 2-core CPU a second
    # OpenMP thread competing with other processes made steps up to 8x slower. The wall-clock
    # guard keeps the laptop run within 5 minutes of training even on a busy machine.
    "cpu-tiny": {"threads": 1, "max_train_time_s": 290.0},
    # The smallest run that exercises every part of the loop in seconds: the one-layer cpu-micro model, a
    # 4-update cold start, 3 rollout steps. For tests and the book's live demonstrations, not for results.
    "micro": {
        "threads": 1,
        "max_train_time_s": 0,
        "model": {"name_or_path": "cpu-micro"},
        "task": {"num_train": 40, "num_dev": 8, "num_eval": 8},
        "cold_start": {"max_updates": 4, "eval_every": 2, "batch_size": 16, "cache_dir": ""},
        "rollout": {"prompts_per_rollout": 4, "num_generations": 4, "max_completion_length": 4},
        "optimization": {"max_steps": 3},
        "evaluation": {"dev_every": 3, "dev_prompts": 8, "num_samples": 2, "pass_k": [1, 2]},
    },
    "gpu-gpt2-small": {
        "model": {"name_or_path": "gpu-gpt2-small"},
        "task": {"options": {"min_digits": 1, "max_digits": 5}, "num_train": 100000, "num_eval": 1024},
        "cold_start": {"batch_size": 128, "sft_learning_rate": 3e-4, "max_updates": 20000, "eval_every": 100},
        "rollout": {"prompts_per_rollout": 64, "num_generations": 16, "max_completion_length": 8},
        "optimization": {"max_steps": 500, "learning_rate": 2e-5, "warmup_steps": 20},
        "evaluation": {"dev_prompts": 256, "num_samples": 8, "pass_k": [1, 8]},
        "save_steps": 50,
    },
}


# ---------------------------------------------------------------- parsing


def _unwrap_optional(tp):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _coerce(value, tp, key: str):
    base, optional = _unwrap_optional(tp)
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and optional):
        if optional:
            return None
        raise ValueError(f"config key {key!r} cannot be null")
    if typing.get_origin(base) is tuple:
        if isinstance(value, str):
            value = [v for v in value.replace(",", " ").split() if v]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"config key {key!r} must be a list, got {value!r}")
        (elem, *_) = typing.get_args(base)
        return tuple(_coerce(v, elem, key) for v in value)
    if base is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ValueError(f"config key {key!r} must be true or false, got {value!r}")
    if base is int:
        if isinstance(value, bool):
            raise ValueError(f"config key {key!r} must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ValueError(f"config key {key!r} must be an integer, got {value!r}")
    if base is float:
        if isinstance(value, bool):
            raise ValueError(f"config key {key!r} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"config key {key!r} must be a number, got {value!r}") from None
    if base is dict:  # task options: a mapping, or JSON text from the command line
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f"config key {key!r} must be a JSON object, got {value!r}") from None
        if not isinstance(value, dict):
            raise ValueError(f"config key {key!r} must be a mapping, got {value!r}")
        return dict(value)
    if base is str:
        if not isinstance(value, str):
            raise ValueError(f"config key {key!r} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config type {tp} for {key!r}")


def _build(cls, data: dict, prefix: str = ""):
    if not isinstance(data, dict):
        raise ValueError(f"config section {prefix.rstrip('.') or '<root>'!r} must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown config key {prefix + unknown[0]!r}; known keys here: {sorted(names)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            kwargs[f.name] = _build(tp, data[f.name], prefix + f.name + ".")
        else:
            kwargs[f.name] = _coerce(data[f.name], tp, prefix + f.name)
    return cls(**kwargs)


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def leaf_keys(cls=TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted key of the tree, e.g. ``loss.loss_type``."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys += leaf_keys(hints[f.name], prefix + f.name + ".")
        else:
            keys.append(prefix + f.name)
    return keys


def resolve_key(key: str) -> str:
    """A dotted key, or a leaf name that is unique in the tree (``loss_type`` -> ``loss.loss_type``)."""
    key = key.replace("-", "_")
    keys = leaf_keys()
    if key in keys:
        return key
    matches = [k for k in keys if k.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ValueError(f"config key {key!r} is ambiguous; use one of {matches}")
    raise ValueError(f"unknown config key {key!r}")


def _nest(dotted: str, value) -> dict:
    out: dict = {}
    cur = out
    parts = dotted.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


def load_config(preset_or_file: str = "cpu-tiny", overrides: dict | None = None) -> TrainConfig:
    """A validated config from a preset name or a JSON file, then ``overrides``.

    ``overrides`` maps dotted or unique leaf keys to values (strings are parsed).
    """
    if preset_or_file in PRESETS:
        data = PRESETS[preset_or_file]
    elif preset_or_file.endswith(".json") or os.path.exists(preset_or_file):
        if not os.path.isfile(preset_or_file):
            raise ValueError(f"config file {preset_or_file!r} does not exist")
        try:
            with open(preset_or_file) as f:
                data = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"config file {preset_or_file!r} is not valid JSON: {exc}") from None
    else:
        raise ValueError(f"unknown preset {preset_or_file!r}; presets: {sorted(PRESETS)}, or a .json file")
    for key, value in (overrides or {}).items():
        if key.replace("-", "_").startswith("task.options."):  # one task option: --task.options.max_digits 3
            data = _merge(data, _nest(key.replace("-", "_"), _parse_option(value)))
        else:
            data = _merge(data, _nest(resolve_key(key), value))
    cfg = _build(TrainConfig, data)
    validate(cfg)
    return cfg


def _parse_option(value):
    """A task option given as text is read as JSON when it parses (``3``, ``true``), else kept as text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def config_from_dict(data: dict) -> TrainConfig:
    """A validated config from the plain dict that ``to_dict`` (and ``config.json``) hold."""
    cfg = _build(TrainConfig, data)
    validate(cfg)
    return cfg


def _require(cond: bool, key: str, value, rule: str) -> None:
    if not cond:
        raise ValueError(f"config key {key!r} = {value!r} is invalid: {rule}")


def _get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


# One rule per row: (dotted key, test of its value, what the rule says). Rules that relate
# several keys follow in validate().
_RULES = [
    ("task.num_train", lambda v: v >= 1, "must be >= 1"),
    ("task.num_dev", lambda v: v >= 1, "must be >= 1"),
    ("task.num_eval", lambda v: v >= 1, "must be >= 1"),
    ("cold_start.max_updates", lambda v: v >= 0, "must be >= 0"),
    ("cold_start.batch_size", lambda v: v >= 1, "must be >= 1"),
    ("cold_start.sft_learning_rate", lambda v: v > 0, "must be > 0"),
    ("cold_start.target_pass1", lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    ("cold_start.eval_every", lambda v: v >= 1, "must be >= 1"),
    ("rollout.prompts_per_rollout", lambda v: v >= 1, "must be >= 1"),
    ("rollout.num_generations", lambda v: v >= 2, "group advantages need >= 2"),
    ("rollout.max_completion_length", lambda v: v >= 1, "must be >= 1"),
    ("rollout.temperature", lambda v: v > 0, "must be > 0 (sampling, not greedy)"),
    ("optimization.max_steps", lambda v: v >= 0, "must be >= 0"),
    ("optimization.learning_rate", lambda v: v > 0, "must be > 0"),
    ("optimization.lr_scheduler_type", lambda v: v in LR_SCHEDULES, f"must be one of {LR_SCHEDULES}"),
    ("optimization.warmup_steps", lambda v: v >= 0, "must be >= 0"),
    ("optimization.weight_decay", lambda v: v >= 0, "must be >= 0"),
    ("optimization.adam_beta1", lambda v: 0 <= v < 1, "Adam betas must be in [0, 1)"),
    ("optimization.adam_beta2", lambda v: 0 <= v < 1, "Adam betas must be in [0, 1)"),
    ("optimization.max_grad_norm", lambda v: v >= 0, "must be >= 0 (0 = off)"),
    ("optimization.beta", lambda v: v >= 0, "must be >= 0"),
    ("loss.loss_type", lambda v: isinstance(v, str) and v in KERNELS, f"must be one of {LOSS_TYPES}"),
    ("loss.sapo_temperature_pos", lambda v: v > 0, "must be > 0"),
    ("loss.sapo_temperature_neg", lambda v: v > 0, "must be > 0"),
    ("loss.epsilon", lambda v: 0 < v < 1, "must be in (0, 1)"),
    ("loss.epsilon_high", lambda v: v is None or v > 0, "must be > 0"),
    (
        "loss.importance_sampling_level",
        lambda v: v is None or v in IMPORTANCE_SAMPLING_LEVELS,
        f"must be null or one of {IMPORTANCE_SAMPLING_LEVELS}",
    ),
    ("loss.aggregation", lambda v: v in AGGREGATIONS, f"must be one of {AGGREGATIONS}"),
    ("loss.max_log_ratio", lambda v: v > 0, "must be > 0"),
    ("loss.max_log_ratio_policy", lambda v: v in MAX_LOG_RATIO_POLICIES, f"must be one of {MAX_LOG_RATIO_POLICIES}"),
    ("evaluation.dev_every", lambda v: v >= 1, "must be >= 1"),
    ("evaluation.dev_prompts", lambda v: v >= 1, "must be >= 1"),
    ("evaluation.num_samples", lambda v: v >= 1, "must be >= 1"),
    ("evaluation.eval_temperature", lambda v: v is None or v >= 0, "must be >= 0"),
    ("evaluation.gradient_comparison_every", lambda v: v >= 0, "must be >= 0 (0 = off)"),
    ("device", lambda v: v in ("auto", "cpu") or v.startswith("cuda"), "must be 'auto', 'cpu' or 'cuda[:N]'"),
    ("save_steps", lambda v: v >= 1, "must be >= 1"),
    ("max_train_time_s", lambda v: v >= 0, "must be >= 0"),
    ("threads", lambda v: v >= 0, "must be >= 0"),
]


def validate(cfg: TrainConfig) -> None:
    """Raise ``ValueError`` naming the first key whose value breaks a rule; build the task once to check it."""
    for key, ok, rule in _RULES:
        _require(ok(_get(cfg, key)), key, _get(cfg, key), rule)
    r, o, lc, e = cfg.rollout, cfg.optimization, cfg.loss, cfg.evaluation
    n = r.prompts_per_rollout * r.num_generations
    _require(1 <= o.steps_per_generation <= n, "optimization.steps_per_generation", o.steps_per_generation,
             f"must be in [1, responses per rollout = {n}]")
    level_problem = kernel_for(lc.loss_type).level_error(lc.importance_sampling_level)
    _require(level_problem is None, "loss.importance_sampling_level", lc.importance_sampling_level, str(level_problem))
    _require(len(e.pass_k) >= 1 and all(1 <= k <= e.num_samples for k in e.pass_k), "evaluation.pass_k", e.pass_k,
             f"each k must be in [1, num_samples={e.num_samples}]")
    make_task(cfg.task.name, cfg.task.options)  # its errors name task.name / task.options
