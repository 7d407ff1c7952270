"""The task protocol, the problem record, the registry and the frozen splits.

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
"""

from __future__ import annotations

import importlib
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


# Optional members of a task: a mix of families names each problem's family and declares
# the families' weights; a single-family task is its own family with weight 1.


def family_of(task: Task, problem: Problem) -> str:
    """The family of ``problem`` under ``task``: the mix's ``family_of``, else the task's name."""
    return task.family_of(problem) if hasattr(task, "family_of") else task.name


def family_weights(task: Task) -> dict[str, float]:
    """The declared weight of each family: a mix's ``weights``, else ``{task.name: 1.0}``."""
    return dict(task.weights) if hasattr(task, "weights") else {task.name: 1.0}


def split_eval_first(problems: list[Problem], num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
    """``eval``, then ``dev``, then ``train`` from one drawn list: changing ``num_train`` never changes the
    untouched evaluation set."""
    return {
        "eval": problems[:num_eval],
        "dev": problems[num_eval : num_eval + num_dev],
        "train": problems[num_eval + num_dev :],
    }


def digit_verdict(completion_text: str, finished: bool, canonical: str) -> tuple[float, str]:
    """Verifier rules 1-4 for answers that are a string of ASCII digits: truncated, invalid, correct or wrong."""
    if not finished:
        return 0.0, "truncated"
    answer = completion_text.strip()
    if not answer or not answer.isascii() or not answer.isdigit():
        return 0.0, "invalid"
    return (1.0, "correct") if answer == canonical else (0.0, "wrong")
