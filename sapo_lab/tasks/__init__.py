"""Tasks: prompts with frozen splits and a verifier. Imports nothing else of sapo_lab.

``base`` holds the :class:`Task` protocol, :class:`Problem`, the registry and the
splits; ``addition`` the built-in fixed-width addition; ``suite`` the other
registered families (reversed addition, subtraction, digit sort, reversal, the
scratchpad and carry-dropped variants, the mixed suite). Importing this package
registers all of them, so :func:`make_task` knows every built-in name.
"""

from . import addition, suite  # noqa: F401  (registers the built-in tasks)
from .addition import AdditionTask, count_carries, make_problem, make_splits, reversed_sum, verify
from .base import (
    REASONS,
    SPLITS,
    Problem,
    RewardFn,
    Task,
    check_splits,
    family_of,
    family_weights,
    make_task,
    register_task,
    registered_tasks,
    splits_for,
    task_for,
)

__all__ = [
    "REASONS", "SPLITS", "AdditionTask", "Problem", "RewardFn", "Task", "check_splits", "family_of", "family_weights",
    "count_carries", "make_problem", "make_splits", "make_task", "register_task",
    "registered_tasks", "reversed_sum", "splits_for", "task_for", "verify",
]
