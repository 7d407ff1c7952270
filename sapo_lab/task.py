"""Tasks: prompts with frozen splits and a verifier; the built-in one is fixed-width addition.

A task is any object with four members (the :class:`Task` protocol):

* ``name``: a short name, e.g. ``"addition"``;
* ``alphabet``: every character a prompt or an answer may contain (the character
  tokenizer is built from it);
* ``make_splits(seed, num_train, num_dev, num_eval)``: disjoint ``train`` / ``dev`` /
  ``eval`` lists of :class:`Problem`, a pure function of the arguments and the task's
  options: ``train`` for rollouts, ``dev`` for tuning and per-step monitoring, ``eval``
  only for reporting;
* ``verify(completion_text, finished, problem)``: ``(reward, reason)``, where
  ``reason == "correct"`` exactly when the answer earns full credit.

A task's options are its constructor's keyword arguments (JSON values, all with
defaults). The config names a task by a registered name (:func:`register_task`) or by
an import path ``"my_module:MyTask"``, plus its options; :func:`make_task` builds it.
A reward other than the task's verifier is a :data:`RewardFn` passed to the rollout.

**The addition task.** With ``max_digits = 3``, 47 + 385 is the prompt ``"047+385="``
and the answer is ``"2340"`` (the sum 0432 written least-significant digit first),
then the end-of-sequence token. Zero-padded operands put every digit at a fixed
position, and writing the sum from its lowest digit lets a causal model emit each digit
after the carry it depends on. The format is part of the task, not a trick of the
verifier.

Verifier rules (declared, in order):

1. ``truncated``: no EOS within ``max_completion_length`` tokens -> reward 0.
2. The answer is the decoded text before EOS with surrounding whitespace removed.
3. ``invalid``: empty, or any character other than a digit -> reward 0.
4. ``correct``: exactly the canonical answer (``max_digits + 1`` reversed digits)
   -> reward 1; otherwise ``wrong`` -> reward 0 (a numerically equal answer of
   another width is ``wrong``: the format is part of the task).
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

REASONS = ("correct", "wrong", "invalid", "truncated")
SPLITS = ("train", "dev", "eval")


@dataclass(frozen=True)
class Problem:
    """One prompt, its canonical answer (without EOS) and a difficulty level for breakdowns."""

    prompt: str
    answer: str  # canonical answer text, without EOS
    difficulty: int  # e.g. the number of carries in the column addition


@runtime_checkable
class Task(Protocol):
    """What the trainer needs from a task (see the module docstring)."""

    name: str
    alphabet: str

    def make_splits(self, seed: int, num_train: int, num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
        """Disjoint ``train`` / ``dev`` / ``eval`` problem lists, a pure function of the arguments."""
        ...

    def verify(self, completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
        """``(reward, reason)`` for one completion; ``finished``: EOS was produced in time."""
        ...


RewardFn = Callable[[str, bool, Problem], tuple[float, str]]
"""``reward_fn(completion_text, finished, problem) -> (reward, reason)``; the default is ``task.verify``."""

_REGISTRY: dict[str, type] = {}


def register_task(name: str):
    """Class decorator: make a task class buildable as ``make_task(name)`` (and set its ``name``)."""

    def add(cls):
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"task name {name!r} is already registered to {_REGISTRY[name].__qualname__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return add


def registered_tasks() -> list[str]:
    """The names :func:`make_task` accepts without an import path."""
    return sorted(_REGISTRY)


def _resolve_task_class(name_or_import_path: str):
    if not isinstance(name_or_import_path, str) or not name_or_import_path:
        raise ValueError(f"task.name must be a non-empty string, got {name_or_import_path!r}")
    if ":" not in name_or_import_path:
        from . import task_suite  # noqa: F401  (imported here, not at the top: it imports this module)

        if name_or_import_path not in _REGISTRY:
            raise ValueError(
                f"unknown task.name {name_or_import_path!r}; registered tasks: {registered_tasks()}, "
                "or an import path 'module:Class'"
            )
        return _REGISTRY[name_or_import_path]
    module_name, _, attr = name_or_import_path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"task.name {name_or_import_path!r}: cannot import module {module_name!r} ({exc})") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"task.name {name_or_import_path!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def make_task(name_or_import_path: str, options: dict | None = None) -> Task:
    """Build a task from a registered name (``"addition"``) or an import path (``"my_module:MyTask"``).

    ``options`` are the task's constructor keyword arguments. Errors are one line naming
    ``task.name`` or ``task.options``.
    """
    factory = _resolve_task_class(name_or_import_path)
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ValueError(f"task.options must be a mapping of keyword arguments, got {options!r}")
    if not callable(factory):
        raise ValueError(f"task.name {name_or_import_path!r} is not a class or a callable")
    try:
        task = factory(**options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"task.options {options!r} do not fit task {name_or_import_path!r}: {exc}") from None
    missing = [m for m in ("name", "alphabet", "make_splits", "verify") if not hasattr(task, m)]
    if missing or not isinstance(task, Task):
        raise ValueError(f"task.name {name_or_import_path!r} does not implement the Task protocol: missing {missing}")
    if not isinstance(task.alphabet, str) or not task.alphabet:
        raise ValueError(f"task {name_or_import_path!r}: alphabet must be a non-empty string, got {task.alphabet!r}")
    return task


def task_for(cfg) -> Task:
    """The task a config names (``cfg.task.name`` with ``cfg.task.options``)."""
    return make_task(cfg.task.name, cfg.task.options)


def splits_for(cfg, task: Task | None = None) -> dict[str, list[Problem]]:
    """The frozen train/dev/eval splits of a config, checked against the task's alphabet."""
    t = cfg.task
    task = task_for(cfg) if task is None else task
    splits = task.make_splits(seed=t.split_seed, num_train=t.num_train, num_dev=t.num_dev, num_eval=t.num_eval)
    check_splits(splits, task.alphabet)
    return splits


def check_splits(splits: dict, alphabet: str) -> None:
    """Refuse splits that are missing, overlap, or use characters outside the tokenizer's alphabet."""
    if not isinstance(splits, dict) or set(splits) != set(SPLITS):
        got = sorted(splits) if isinstance(splits, dict) else type(splits).__name__
        raise ValueError(f"make_splits must return the keys {list(SPLITS)}, got {got}")
    allowed = set(alphabet)
    seen: dict[str, str] = {}
    for split in SPLITS:
        if not splits[split]:
            raise ValueError(f"task split {split!r} is empty")
        for p in splits[split]:
            bad = set(p.prompt + p.answer) - allowed
            if bad:
                raise ValueError(f"task split {split!r}: {p!r} uses characters {sorted(bad)} missing from the task's alphabet")
            if seen.setdefault(p.prompt, split) != split:
                raise ValueError(f"task splits overlap: prompt {p.prompt!r} is in both {seen[p.prompt]!r} and {split!r}")


# ---------------------------------------------------------------- the addition task


def count_carries(a: int, b: int) -> int:
    """Carries in the column addition of ``a`` and ``b`` (the addition task's difficulty)."""
    carries = carry = 0
    while a or b or carry:
        carry = 1 if a % 10 + b % 10 + carry >= 10 else 0
        carries += carry
        a, b = a // 10, b // 10
    return carries


def reversed_sum(a: int, b: int, width: int) -> str:
    """The sum zero-padded to ``width + 1`` digits, least-significant digit first."""
    return str(a + b).zfill(width + 1)[::-1]


def make_problem(a: int, b: int, width: int) -> Problem:
    """The addition problem ``a + b`` with operands zero-padded to ``width`` digits."""
    if a < 0 or b < 0 or max(a, b) >= 10**width:
        raise ValueError(f"operands must be in [0, 10**{width}), got {a}, {b}")
    return Problem(
        prompt=f"{a:0{width}d}+{b:0{width}d}=",
        answer=reversed_sum(a, b, width),
        difficulty=count_carries(a, b),
    )


def make_splits(
    seed: int = 0,
    min_digits: int = 1,
    max_digits: int = 3,
    num_train: int = 20000,
    num_dev: int = 256,
    num_eval: int = 512,
) -> dict[str, list[Problem]]:
    """Disjoint train/dev/eval problem lists, a pure function of the arguments.

    Each operand is drawn uniformly from the integers with ``min_digits`` to
    ``max_digits`` digits, so every split has the same distribution (drawing the digit
    count first would make the few short pairs run out in the first split drawn);
    pairs are unique across all splits. ``Problem.difficulty`` is the number of carries.
    """
    if not 1 <= min_digits <= max_digits <= 9:
        raise ValueError(f"need 1 <= min_digits <= max_digits <= 9, got {min_digits}, {max_digits}")
    for name, n in (("num_train", num_train), ("num_dev", num_dev), ("num_eval", num_eval)):
        if n < 1:
            raise ValueError(f"{name} must be >= 1, got {n}")
    total = num_train + num_dev + num_eval
    space = sum((10**d - (0 if d == 1 else 10 ** (d - 1))) for d in range(min_digits, max_digits + 1)) ** 2
    if total > space * 0.9:  # rejection sampling of unique pairs needs slack
        raise ValueError(f"{total} problems requested but only {space} distinct pairs exist; use more digits")
    rng = random.Random(f"sapo-lab-addition-{seed}")
    seen: set[tuple[int, int]] = set()
    problems: list[Problem] = []

    lo = 0 if min_digits == 1 else 10 ** (min_digits - 1)
    while len(problems) < total:
        a = rng.randrange(lo, 10**max_digits)
        b = rng.randrange(lo, 10**max_digits)
        if (a, b) in seen:
            continue
        seen.add((a, b))
        problems.append(make_problem(a, b, max_digits))
    # Eval first, so that changing num_train never changes the untouched evaluation set.
    return {
        "eval": problems[:num_eval],
        "dev": problems[num_eval : num_eval + num_dev],
        "train": problems[num_eval + num_dev :],
    }


def verify(completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
    """The addition verifier: (reward, reason) for one completion. ``finished``: EOS was produced in time."""
    if not finished:
        return 0.0, "truncated"
    answer = completion_text.strip()
    if not answer or not answer.isdigit() or not answer.isascii():
        return 0.0, "invalid"
    if answer == problem.answer:
        return 1.0, "correct"
    return 0.0, "wrong"


@register_task("addition")
@dataclass(frozen=True)
class AdditionTask:
    """Fixed-width addition with a reversed-digit answer (see the module docstring).

    Options: ``min_digits`` / ``max_digits``, the operand sizes (defaults: the
    ``cpu-tiny`` preset's 1 to 2 digits).
    """

    min_digits: int = 1
    max_digits: int = 2
    alphabet = "0123456789+="  # a class attribute, not an option

    def __post_init__(self):
        for key in ("min_digits", "max_digits"):
            if type(getattr(self, key)) is not int:
                raise ValueError(f"{key} must be an integer, got {getattr(self, key)!r}")
        if not 1 <= self.min_digits <= self.max_digits <= 9:
            raise ValueError(f"need 1 <= min_digits <= max_digits <= 9, got {self.min_digits}, {self.max_digits}")

    def make_splits(self, seed: int, num_train: int, num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
        """See :func:`make_splits`."""
        return make_splits(seed, self.min_digits, self.max_digits, num_train, num_dev, num_eval)

    def verify(self, completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
        """See :func:`verify`."""
        return verify(completion_text, finished, problem)
