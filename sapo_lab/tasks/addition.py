"""The built-in task: fixed-width addition with a reversed-digit answer.

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

import random
import re
from dataclasses import dataclass

from .base import Problem, digit_verdict, register_task, split_eval_first


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
    return split_eval_first(problems, num_dev, num_eval)


def verify(completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
    """The addition verifier: (reward, reason) for one completion. ``finished``: EOS was produced in time."""
    return digit_verdict(completion_text, finished, problem.answer)


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
    prompt_pattern = re.compile(r"[0-9]+\+[0-9]+=")  # what a prompt of this family looks like

    def __post_init__(self):
        for key in ("min_digits", "max_digits"):
            if type(getattr(self, key)) is not int:
                raise ValueError(f"{key} must be an integer, got {getattr(self, key)!r}")
        if not 1 <= self.min_digits <= self.max_digits <= 9:
            raise ValueError(f"need 1 <= min_digits <= max_digits <= 9, got {self.min_digits}, {self.max_digits}")

    @property
    def max_answer_length(self) -> int:
        """Characters in the longest canonical answer (EOS not counted)."""
        return self.max_digits + 1

    def make_splits(self, seed: int, num_train: int, num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
        """See :func:`make_splits`."""
        return make_splits(seed, self.min_digits, self.max_digits, num_train, num_dev, num_eval)

    def verify(self, completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
        """See :func:`verify`."""
        return verify(completion_text, finished, problem)
