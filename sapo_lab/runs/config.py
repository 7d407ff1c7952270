"""One dataclass tree for a run, saved as ``config.json`` next to it.

Field names follow TRL's ``GRPOConfig`` where it has an equivalent (``loss_type``,
``num_generations``, ``max_completion_length``, ``temperature``, ``learning_rate``,
``beta``, ``epsilon``/``epsilon_high``, ``importance_sampling_level``,
``steps_per_generation``, ``sapo_temperature_pos``/``sapo_temperature_neg``,
``max_grad_norm``, ``lr_scheduler_type``, ``warmup_steps``, ``max_steps``,
``save_steps``). ``sapo_temperature_pos/neg`` are the review's tau_pos / tau_neg.

The sections are pydantic dataclasses: each field's type and bound is declared on its line,
and pydantic coerces and checks the values (:mod:`sapo_lab.runs.config_values` holds the
types and the one-line messages). They stay plain dataclasses to the rest of the package:
attribute access, assignment without re-validation (a run's config is fixed once loaded; code
that adjusts one, such as a benchmark, sets plain values), ``dataclasses.asdict`` and
equality. What no library gives is here: a preset or a JSON file as the base, dotted or
unique-leaf override keys, and the rules that relate several keys.

Unknown keys and bad values raise a one-line ``ValueError`` naming the offending key.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import typing
from dataclasses import field
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic.dataclasses import dataclass

from ..objective.choices import AGGREGATIONS, IMPORTANCE_SAMPLING_LEVELS, MAX_LOG_RATIO_POLICIES
from ..tasks import make_task
from .config_paths import TASK_OPTIONS, task_option_name
from .config_values import Float, Int, IntList, Mapping, RuleBroken, nullable, one_line, one_of
from .durable import write_json
from .json_object import read_json_object

LR_SCHEDULES = ("constant", "constant_with_warmup", "linear", "cosine")


def _choices(names: tuple[str, ...]) -> str:
    """``a, b or c``: a key's allowed values in its help line, written from the tuple that checks them."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


# A misspelt key is refused, never ignored.
_SECTION = ConfigDict(extra="forbid")


def _device(value: str) -> str:
    if value in ("auto", "cpu") or value.startswith("cuda"):
        return value
    raise ValueError("must be 'auto', 'cpu' or 'cuda[:N]'")


def _loss_types() -> tuple[str, ...]:
    from ..objective.registry import KERNELS  # the registry loads torch: read only when a config is checked

    return tuple(KERNELS)


# The keys whose values are names from a fixed list, and the device.
LossType = Annotated[str, one_of(_loss_types)]  # read when checked: kernels registered later count too
Level = nullable(Annotated[str, one_of(IMPORTANCE_SAMPLING_LEVELS)])
Schedule = Annotated[str, one_of(LR_SCHEDULES)]
Pooling = Annotated[str, one_of(AGGREGATIONS)]
RatioPolicy = Annotated[str, one_of(MAX_LOG_RATIO_POLICIES)]
Device = Annotated[str, AfterValidator(_device)]
Fraction = Annotated[Float, Field(ge=0, le=1)]


@dataclass(config=_SECTION)
class ModelConfig:
    """The policy to start from."""

    name_or_path: str = Field("cpu-tiny", description=(
        "a size in sapo_lab.training.model.MODEL_SIZES, a directory, or a hub name"))


@dataclass(config=_SECTION)
class TaskConfig:
    """Which task (see :mod:`sapo_lab.tasks`) and how many problems each frozen split holds."""

    name: str = Field("addition", description="a registered task name, or an import path \"my_module:MyTask\"")
    options: Mapping = Field(default_factory=dict, description="the task's constructor keyword arguments")
    split_seed: Int = Field(0, description="the splits are frozen: independent of the run's seed")
    num_train: Annotated[Int, Field(ge=1)] = Field(8000, description="training prompts drawn for rollouts")
    num_dev: Annotated[Int, Field(ge=1)] = Field(256, description=(
        "development prompts: dev Pass@1 during training, checkpoint selection"))
    num_eval: Annotated[Int, Field(ge=1)] = Field(512, description="untouched evaluation prompts: reported Pass@1 only")


@dataclass(config=_SECTION)
class ColdStartConfig:
    """Supervised warm start, stopped once sampled dev Pass@1 reaches ``target_pass1``."""

    max_updates: Annotated[Int, Field(ge=0)] = Field(3000, description=(
        "0 skips the cold start (e.g. for an already fine-tuned --model)"))
    batch_size: Annotated[Int, Field(ge=1)] = Field(64, description="SFT examples per update")
    sft_learning_rate: Annotated[Float, Field(gt=0)] = Field(2e-3, description="AdamW learning rate of the warm start")
    target_pass1: Fraction = Field(0.3, description="stop once sampled dev Pass@1 reaches this (rewards must not be all 0)")
    eval_every: Annotated[Int, Field(ge=1)] = Field(20, description="SFT updates between dev measurements")
    cache_dir: str = Field("runs/_coldstart", description="\"\" disables the cache")


@dataclass(config=_SECTION)
class RolloutConfig:
    """Sampling of each rollout batch (Algorithm 1)."""

    prompts_per_rollout: Annotated[Int, Field(ge=1)] = Field(32, description=(
        "prompts per rollout batch; responses = this * num_generations"))
    num_generations: Annotated[Int, Field(ge=2)] = Field(8, description="G, responses per prompt")
    max_completion_length: Annotated[Int, Field(ge=1)] = Field(5, description=(
        "the addition answer is max_digits + 1 digits, then EOS"))
    temperature: Annotated[Float, Field(gt=0)] = Field(1.0, description=(
        "sampling temperature of the rollouts (the behavior policy)"))


@dataclass(config=_SECTION)
class OptimizationConfig:
    """The M minibatch updates per rollout batch (Algorithm 2) and the optimizer."""

    max_steps: Annotated[Int, Field(ge=0)] = Field(600, description=(
        "rollout steps; each makes steps_per_generation optimizer steps"))
    steps_per_generation: Int = Field(4, description="M update minibatches per rollout batch (the paper's 4)")
    learning_rate: Annotated[Float, Field(gt=0)] = Field(2e-4, description="AdamW peak learning rate")
    lr_scheduler_type: Schedule = Field("constant_with_warmup", description=f"learning-rate schedule: {_choices(LR_SCHEDULES)}")
    warmup_steps: Annotated[Int, Field(ge=0)] = Field(10, description="optimizer steps")
    weight_decay: Annotated[Float, Field(ge=0)] = Field(0.0, description="AdamW decoupled weight decay")
    adam_beta1: Annotated[Float, Field(ge=0, lt=1)] = Field(0.9, description="AdamW first-moment decay")
    adam_beta2: Annotated[Float, Field(ge=0, lt=1)] = Field(0.99, description="AdamW second-moment decay")
    max_grad_norm: Annotated[Float, Field(ge=0)] = Field(1.0, description="0 disables clipping (the norm is still logged)")
    beta: Annotated[Float, Field(ge=0)] = Field(0.0, description=(
        "KL coefficient to the cold-start reference; 0 = off, no reference kept"))
    skip_zero_advantage: bool = Field(True, description=(
        "Responses with advantage 0 contribute exactly nothing to the policy gradient, so (when beta = 0) "
        "they are left out of the forward/backward and the loss is rescaled to the full minibatch's "
        "normalisation: the same update for less compute."))


@dataclass(config=_SECTION)
class LossConfig:
    """The policy loss, in TRL's names; :meth:`policy_loss_kwargs` maps them to :func:`sapo_lab.policy_loss`."""

    loss_type: LossType = Field("sapo", description=(
        "a kernel of sapo_lab.objective.registry (sapo, grpo, gspo, sapo_directional, gauss)"))
    sapo_temperature_pos: Annotated[Float, Field(gt=0)] = Field(1.0, description=(
        "tau_pos: gate temperature for tokens with advantage > 0"))
    sapo_temperature_neg: Annotated[Float, Field(gt=0)] = Field(1.05, description=(
        "tau_neg: gate temperature for tokens with advantage < 0"))
    epsilon: Annotated[Float, Field(gt=0, lt=1)] = Field(0.2, description=(
        "lower clip width of grpo/gspo (ratio floor 1 - epsilon)"))
    epsilon_high: nullable(Annotated[Float, Field(gt=0)]) = Field(None, description="None: same as epsilon")
    importance_sampling_level: Level = Field(None, description=(
        "None: the kernel's default (sequence for gspo, token otherwise)"))
    aggregation: Pooling = Field("per_response", description=(
        f"token averaging, {_choices(AGGREGATIONS)} (also for the KL term)"))
    max_log_ratio: Annotated[Float, Field(gt=0)] = Field(20.0, description="|log r| above this counts as extreme staleness")
    max_log_ratio_policy: RatioPolicy = Field("record", description=(
        f"what an extreme ratio does: {_choices(MAX_LOG_RATIO_POLICIES)}"))

    @model_validator(mode="after")
    def _level_fits_the_kernel(self):
        from ..objective.registry import kernel_for  # the registry loads torch: only when a config is checked

        problem = kernel_for(self.loss_type).level_error(self.importance_sampling_level)
        if problem:
            raise RuleBroken("importance_sampling_level", self.importance_sampling_level, problem)
        return self

    def resolved_importance_sampling_level(self) -> str:
        """The level ``policy_loss`` uses: the configured one, else the kernel's default."""
        from ..objective.registry import resolved_level

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


@dataclass(config=_SECTION)
class EvaluationConfig:
    """Held-out evaluation and the per-step dev measurement."""

    dev_every: Annotated[Int, Field(ge=1)] = Field(10, description="rollout steps between dev-subset Pass@1 measurements")
    dev_prompts: Annotated[Int, Field(ge=1)] = Field(128, description="dev prompts per dev measurement (one sample each)")
    num_samples: Annotated[Int, Field(ge=1)] = Field(4, description="n samples per held-out prompt for Pass@1 / pass@k")
    pass_k: IntList = Field((1, 4), description="the k of the reported pass@k estimates (each <= num_samples)")
    eval_temperature: nullable(Annotated[Float, Field(ge=0)]) = Field(None, description="None: the rollout temperature")
    greedy: bool = Field(True, description="held-out evaluation also reports greedy-decoding accuracy")
    gradient_comparison_every: Annotated[Int, Field(ge=0)] = Field(10, description=(
        "Every this many rollout steps, the step's last (stalest) minibatch also computes the token- and "
        "sequence-level gradients and their §9 decomposition (diagnostics.py): about five extra backward "
        "passes, no change to the update or to any random stream. 0 = off."))

    @model_validator(mode="after")
    def _each_k_fits_the_samples(self):
        if not self.pass_k or not all(1 <= k <= self.num_samples for k in self.pass_k):
            raise RuleBroken("pass_k", self.pass_k, f"each k must be in [1, num_samples={self.num_samples}]")
        return self


@dataclass(config=_SECTION)
class TrainConfig:
    """Everything that decides a run; saved as the run's ``config.json``."""

    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    seed: Annotated[Int, Field(ge=0, lt=2**32)] = Field(0, description=(
        "model init, cold start, sampling and minibatch order (numpy takes 0 <= seed < 2**32)"))
    device: Device = Field("auto", description="\"auto\" = cuda if available, else cpu")
    save_steps: Annotated[Int, Field(ge=1)] = Field(50, description="checkpoint every N rollout steps (and on Ctrl-C)")
    max_train_time_s: Annotated[Float, Field(ge=0)] = Field(0.0, description=(
        "stop training after this wall time; 0 = no limit"))
    threads: Annotated[Int, Field(ge=0)] = Field(0, description="torch CPU threads; 0 = torch's default")

    @model_validator(mode="after")
    def _minibatches_fit_the_rollout(self):
        n = self.rollout.prompts_per_rollout * self.rollout.num_generations
        k = self.optimization.steps_per_generation
        if not 1 <= k <= n:
            raise RuleBroken("optimization.steps_per_generation", k, f"must be in [1, responses per rollout = {n}]")
        return self

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


_TREE = TypeAdapter(TrainConfig)


def _section(path: tuple) -> type:
    cls = TrainConfig
    for name in path:
        cls = typing.get_type_hints(cls)[name]
    return cls


def _known_keys(path: tuple) -> list[str]:
    return [f.name for f in dataclasses.fields(_section(path))]


def _validated(data) -> TrainConfig:
    """The config pydantic builds from ``data``, its first problem as a one-line ``ValueError``; then the task is
    built once to check its name and options (its errors name ``task.name`` / ``task.options``)."""
    try:
        cfg = _TREE.validate_python(data)
    except ValidationError as exc:
        raise ValueError(one_line(exc.errors(include_url=False)[0], _known_keys)) from None
    make_task(cfg.task.name, cfg.task.options)
    return cfg


def leaf_keys(cls=TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted key of the tree, e.g. ``loss.loss_type``."""
    return list(_leaf_keys(cls, prefix))


@functools.cache
def _leaf_keys(cls, prefix: str) -> tuple[str, ...]:
    # cached: get_type_hints evaluates every annotation again on each call, which was 90% of expanding a
    # 480-run study (resolve_key reads the tree once per overridden key)
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys += _leaf_keys(hints[f.name], prefix + f.name + ".")
        else:
            keys.append(prefix + f.name)
    return tuple(keys)


def resolve_key(key: str) -> str:
    """A dotted key, a leaf name that is unique in the tree (``loss_type`` -> ``loss.loss_type``), or one
    task option, ``task.options.NAME`` (the task checks the name when it is built)."""
    key = key.replace("-", "_")
    if task_option_name(key):
        return key
    keys = leaf_keys()
    if key in keys:
        return key
    matches = [k for k in keys if k.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ValueError(f"config key {key!r} is ambiguous; use one of {matches}")
    raise UnknownKeyError(key)


class UnknownKeyError(ValueError):
    """A key that is in no section of the tree; the message names the nearest known key, if one is near."""

    def __init__(self, key: str):
        self.key = key
        near = closest_key(key)
        super().__init__(f"unknown config key {key!r}" + (f"; did you mean {near!r}?" if near else ""))


def closest_key(key: str, extra: tuple[str, ...] = ()) -> str | None:
    """The known key nearest to a mistyped ``key`` (difflib's ratio), spelt as the user would type it: a
    unique leaf name for a plain name (``max_step`` -> ``max_steps``), a dotted key for a dotted one; ``extra``
    adds other names (a command's own flags). None when nothing is close."""
    keys = leaf_keys()
    leaves = [k.rsplit(".", 1)[-1] for k in keys]
    unique = [leaf for leaf in leaves if leaves.count(leaf) == 1]
    candidates = [*(keys if "." in key else unique + keys), *extra]
    # '-' and '_' are one keystroke apart and the command line accepts both: compare without the difference
    spelt = {c.replace("-", "_"): c for c in reversed(candidates)}
    near = difflib.get_close_matches(key.replace("-", "_"), list(spelt), n=1, cutoff=0.75)
    return spelt[near[0]] if near else None


def _config_source(preset_or_file: str) -> dict:
    """The base a config starts from: a preset's dict or a JSON file's object; one line for anything else."""
    if preset_or_file in PRESETS:
        return PRESETS[preset_or_file]
    if os.path.isdir(preset_or_file):
        inside = os.path.join(preset_or_file, "config.json")
        hint = f" (a run's config is {inside})" if os.path.isfile(inside) else ""
        raise ValueError(f"config {preset_or_file!r} is a folder; give a preset ({', '.join(PRESETS)}) "
                         f"or a .json file{hint}")
    if preset_or_file.endswith(".json") or os.path.exists(preset_or_file):
        return read_json_object(preset_or_file, "config file")
    near = difflib.get_close_matches(preset_or_file, list(PRESETS), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]}?" if near else f"; presets: {', '.join(PRESETS)}, or a .json file"
    raise ValueError(f"unknown preset {preset_or_file!r}{hint}")


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _nest(dotted: str, value) -> dict:
    out: dict = {}
    cur = out
    parts = dotted.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


def _parse_option(value):
    """A task option given as text is read as JSON when it parses (``3``, ``true``), else kept as text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def load_config(preset_or_file: str = "cpu-tiny", overrides: dict | None = None) -> TrainConfig:
    """A validated config from a preset name or a JSON file, then ``overrides``.

    ``overrides`` maps dotted or unique leaf keys to values (strings are parsed).
    """
    data = _config_source(preset_or_file)
    for key, value in (overrides or {}).items():
        key = resolve_key(key)
        parsed = _parse_option(value)
        # one option, or every option at once as a JSON object (merged with the others, like a file's)
        if task_option_name(key) or (key == TASK_OPTIONS and isinstance(parsed, dict)):
            value = parsed
        data = _merge(data, _nest(key, value))
    return _validated(data)


def config_from_dict(data: dict) -> TrainConfig:
    """A validated config from the plain dict that ``to_dict`` (and ``config.json``) hold."""
    return _validated(data)


def validate(cfg: TrainConfig) -> None:
    """Raise ``ValueError`` naming the first key whose value breaks a rule (after assignments, say)."""
    _validated(cfg.to_dict())
