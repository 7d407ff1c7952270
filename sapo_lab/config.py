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

from .losses import IMPORTANCE_SAMPLING_LEVELS, LOSS_TYPES, MAX_LOG_RATIO_POLICIES
from .masks import AGGREGATIONS

LR_SCHEDULES = ("constant", "constant_with_warmup", "linear", "cosine")


@dataclass
class ModelConfig:
    name_or_path: str = "cpu-tiny"  # a size in sapo_lab.model.MODEL_SIZES, a directory, or a hub name


@dataclass
class TaskConfig:
    split_seed: int = 0  # the splits are frozen: independent of the run's seed
    min_digits: int = 1
    max_digits: int = 2
    num_train: int = 8000
    num_dev: int = 256
    num_eval: int = 512


@dataclass
class ColdStartConfig:
    """Supervised warm start, stopped once sampled dev Pass@1 reaches ``target_pass1``."""

    max_updates: int = 3000  # 0 skips the cold start (e.g. for an already fine-tuned --model)
    batch_size: int = 64
    sft_learning_rate: float = 2e-3
    target_pass1: float = 0.3
    eval_every: int = 20
    cache_dir: str = "runs/_coldstart"  # "" disables the cache


@dataclass
class RolloutConfig:
    prompts_per_rollout: int = 32  # prompts per rollout batch; responses = this * num_generations
    num_generations: int = 8  # G, responses per prompt
    max_completion_length: int = 5  # answer is max_digits + 1 digits, then EOS
    temperature: float = 1.0


@dataclass
class OptimizationConfig:
    max_steps: int = 600  # rollout steps; each makes steps_per_generation optimizer steps
    steps_per_generation: int = 4  # K update minibatches per rollout batch (the paper's 4)
    learning_rate: float = 2e-4
    lr_scheduler_type: str = "constant_with_warmup"
    warmup_steps: int = 10  # optimizer steps
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    max_grad_norm: float = 1.0  # 0 disables clipping (the norm is still logged)
    beta: float = 0.0  # KL coefficient to the cold-start reference; 0 = off, no reference kept
    # Responses with advantage 0 contribute exactly nothing to the policy gradient, so (when
    # beta = 0) they are left out of the forward/backward and the loss is rescaled to the full
    # minibatch's normalisation: the same update for less compute.
    skip_zero_advantage: bool = True


@dataclass
class LossConfig:
    loss_type: str = "sapo"
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    epsilon: float = 0.2
    epsilon_high: float | None = None  # None: same as epsilon
    importance_sampling_level: str | None = None  # None: sequence for gspo, token otherwise
    aggregation: str = "per_response"
    max_log_ratio: float = 20.0
    max_log_ratio_policy: str = "record"


@dataclass
class EvaluationConfig:
    dev_every: int = 10  # rollout steps between dev-subset Pass@1 measurements
    dev_prompts: int = 128
    num_samples: int = 4  # n samples per held-out prompt for Pass@1 / pass@k
    pass_k: tuple[int, ...] = (1, 4)
    eval_temperature: float | None = None  # None: the rollout temperature
    greedy: bool = True


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    seed: int = 0
    device: str = "auto"  # "auto" = cuda if available, else cpu
    save_steps: int = 50  # checkpoint every N rollout steps (and on Ctrl-C)
    max_train_time_s: float = 0.0  # stop training after this wall time; 0 = no limit
    threads: int = 0  # torch CPU threads; 0 = torch's default

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
        os.replace(tmp, path)


PRESETS: dict[str, dict] = {
    # One thread: a 1M-parameter model gains little from more, and on a shared 2-core CPU a second
    # OpenMP thread competing with other processes made steps up to 8x slower. The wall-clock
    # guard keeps the laptop run within 5 minutes of training even on a busy machine.
    "cpu-tiny": {"threads": 1, "max_train_time_s": 290.0},
    "gpu-gpt2-small": {
        "model": {"name_or_path": "gpu-gpt2-small"},
        "task": {"min_digits": 1, "max_digits": 5, "num_train": 100000, "num_eval": 1024},
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
        data = _merge(data, _nest(resolve_key(key), value))
    cfg = _build(TrainConfig, data)
    validate(cfg)
    return cfg


def config_from_dict(data: dict) -> TrainConfig:
    cfg = _build(TrainConfig, data)
    validate(cfg)
    return cfg


def _require(cond: bool, key: str, value, rule: str) -> None:
    if not cond:
        raise ValueError(f"config key {key!r} = {value!r} is invalid: {rule}")


def validate(cfg: TrainConfig) -> None:
    t, c, r, o, lc, e = cfg.task, cfg.cold_start, cfg.rollout, cfg.optimization, cfg.loss, cfg.evaluation
    _require(
        1 <= t.min_digits <= t.max_digits <= 9,
        "task.max_digits",
        t.max_digits,
        "need 1 <= min_digits <= max_digits <= 9",
    )
    for k in ("num_train", "num_dev", "num_eval"):
        _require(getattr(t, k) >= 1, f"task.{k}", getattr(t, k), "must be >= 1")
    _require(c.max_updates >= 0, "cold_start.max_updates", c.max_updates, "must be >= 0")
    _require(c.batch_size >= 1, "cold_start.batch_size", c.batch_size, "must be >= 1")
    _require(c.sft_learning_rate > 0, "cold_start.sft_learning_rate", c.sft_learning_rate, "must be > 0")
    _require(0 <= c.target_pass1 <= 1, "cold_start.target_pass1", c.target_pass1, "must be in [0, 1]")
    _require(c.eval_every >= 1, "cold_start.eval_every", c.eval_every, "must be >= 1")
    _require(r.prompts_per_rollout >= 1, "rollout.prompts_per_rollout", r.prompts_per_rollout, "must be >= 1")
    _require(r.num_generations >= 2, "rollout.num_generations", r.num_generations, "group advantages need >= 2")
    _require(r.max_completion_length >= 1, "rollout.max_completion_length", r.max_completion_length, "must be >= 1")
    _require(r.temperature > 0, "rollout.temperature", r.temperature, "must be > 0 (sampling, not greedy)")
    _require(o.max_steps >= 0, "optimization.max_steps", o.max_steps, "must be >= 0")
    n = r.prompts_per_rollout * r.num_generations
    _require(
        1 <= o.steps_per_generation <= n,
        "optimization.steps_per_generation",
        o.steps_per_generation,
        f"must be in [1, responses per rollout = {n}]",
    )
    _require(o.learning_rate > 0, "optimization.learning_rate", o.learning_rate, "must be > 0")
    _require(
        o.lr_scheduler_type in LR_SCHEDULES,
        "optimization.lr_scheduler_type",
        o.lr_scheduler_type,
        f"must be one of {LR_SCHEDULES}",
    )
    _require(o.warmup_steps >= 0, "optimization.warmup_steps", o.warmup_steps, "must be >= 0")
    _require(o.weight_decay >= 0, "optimization.weight_decay", o.weight_decay, "must be >= 0")
    _require(
        0 <= o.adam_beta1 < 1 and 0 <= o.adam_beta2 < 1,
        "optimization.adam_beta1",
        (o.adam_beta1, o.adam_beta2),
        "Adam betas must be in [0, 1)",
    )
    _require(o.max_grad_norm >= 0, "optimization.max_grad_norm", o.max_grad_norm, "must be >= 0 (0 = off)")
    _require(o.beta >= 0, "optimization.beta", o.beta, "must be >= 0")
    _require(lc.loss_type in LOSS_TYPES, "loss.loss_type", lc.loss_type, f"must be one of {LOSS_TYPES}")
    _require(lc.sapo_temperature_pos > 0, "loss.sapo_temperature_pos", lc.sapo_temperature_pos, "must be > 0")
    _require(lc.sapo_temperature_neg > 0, "loss.sapo_temperature_neg", lc.sapo_temperature_neg, "must be > 0")
    _require(0 < lc.epsilon < 1, "loss.epsilon", lc.epsilon, "must be in (0, 1)")
    _require(lc.epsilon_high is None or lc.epsilon_high > 0, "loss.epsilon_high", lc.epsilon_high, "must be > 0")
    _require(
        lc.importance_sampling_level is None or lc.importance_sampling_level in IMPORTANCE_SAMPLING_LEVELS,
        "loss.importance_sampling_level",
        lc.importance_sampling_level,
        "must be null, 'token' or 'sequence'",
    )
    _require(
        not (lc.loss_type == "gspo" and lc.importance_sampling_level == "token"),
        "loss.importance_sampling_level",
        lc.importance_sampling_level,
        "gspo is defined on the sequence ratio",
    )
    _require(
        lc.aggregation in AGGREGATIONS,
        "loss.aggregation",
        lc.aggregation,
        f"must be one of {AGGREGATIONS}",
    )
    _require(lc.max_log_ratio > 0, "loss.max_log_ratio", lc.max_log_ratio, "must be > 0")
    _require(
        lc.max_log_ratio_policy in MAX_LOG_RATIO_POLICIES,
        "loss.max_log_ratio_policy",
        lc.max_log_ratio_policy,
        f"must be one of {MAX_LOG_RATIO_POLICIES}",
    )
    _require(e.dev_every >= 1, "evaluation.dev_every", e.dev_every, "must be >= 1")
    _require(e.dev_prompts >= 1, "evaluation.dev_prompts", e.dev_prompts, "must be >= 1")
    _require(e.num_samples >= 1, "evaluation.num_samples", e.num_samples, "must be >= 1")
    _require(
        len(e.pass_k) >= 1 and all(1 <= k <= e.num_samples for k in e.pass_k),
        "evaluation.pass_k",
        e.pass_k,
        f"each k must be in [1, num_samples={e.num_samples}]",
    )
    _require(
        e.eval_temperature is None or e.eval_temperature >= 0,
        "evaluation.eval_temperature",
        e.eval_temperature,
        "must be >= 0",
    )
    _require(
        cfg.device == "auto" or cfg.device == "cpu" or cfg.device.startswith("cuda"),
        "device",
        cfg.device,
        "must be 'auto', 'cpu' or 'cuda[:N]'",
    )
    _require(cfg.save_steps >= 1, "save_steps", cfg.save_steps, "must be >= 1")
    _require(cfg.max_train_time_s >= 0, "max_train_time_s", cfg.max_train_time_s, "must be >= 0")
    _require(cfg.threads >= 0, "threads", cfg.threads, "must be >= 0")
