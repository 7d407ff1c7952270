"""A small suite of verifiable task families, and a weighted mix of them.

Every family follows the ``Task`` protocol (``name``, ``alphabet``, ``make_splits``,
``verify``): problems are a pure function of a seed and the family's options, the
``train`` / ``dev`` / ``eval`` splits are disjoint, and ``eval`` is drawn first so that
changing ``num_train`` never changes it. ``Problem.difficulty`` has one declared meaning
per family. Each family's prompts end in its own marker, so a prompt names its family
(:meth:`MixedSuite.family_of`) and one model can be trained on several at once.

family               example prompt   canonical answer            difficulty
addition             047+385=         2340                        carries
subtraction          385-047=         833                         borrows
sorting              s93142=          12349                       number of digits
reversal             r93142=          24139                       number of digits
scratchpad_addition  047+385:         75012,48113,03104=2340      carries

``addition_carry_dropped`` is addition whose training labels carry a known systematic
error (a cold start with a flaw, for review 14.5; see :class:`CarryDroppedColdStart`).

Numbers are written least-significant digit first, as in :mod:`sapo_lab.tasks`: a causal
model then emits each digit after the carry or borrow it depends on.

``scratchpad_addition`` is the long-output family (22 response tokens, plus EOS, at the
default ``width=3``): one five-digit group per column, lowest column first, holding the
column's two digits, the carry in, and the two-digit column total (carry out, sum digit),
then ``=`` and the reversed sum. Prompt (8) + response (22) + EOS fits the 32 positions of
the CPU model sizes. With ``check_trace=False`` its verifier grades the final answer only,
which lets a reward hack through (``=2340`` skips the work and is paid in full): kept as an
option to demonstrate that failure mode, off by default.

Verifier rules, shared by every family (in order):

1. ``truncated``: no EOS within the length limit -> 0.
2. The answer is the decoded text before EOS with surrounding whitespace removed.
3. ``invalid``: empty, or a character the answer format does not allow -> 0.
4. ``correct``: exactly the canonical answer -> 1; otherwise ``wrong`` -> 0. For
   ``scratchpad_addition`` a right final answer after a wrong trace is ``wrong_trace`` -> 0.

``reason == "correct"`` exactly when the reward is full credit.
"""

from __future__ import annotations

import hashlib
import random
import re

from . import addition
from .addition import count_carries, reversed_sum
from .base import Problem, digit_verdict, register_task, split_eval_first

REASONS = ("correct", "wrong", "invalid", "truncated", "wrong_trace", "carry_dropped")
DIGITS = "0123456789"


def _check_sizes(num_train: int, num_dev: int, num_eval: int) -> None:
    for name, n in (("num_train", num_train), ("num_dev", num_dev), ("num_eval", num_eval)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {n!r}")


def _operand_range(min_digits: int, max_digits: int, limit: int = 9) -> tuple[int, int]:
    if not 1 <= min_digits <= max_digits <= limit:
        raise ValueError(f"need 1 <= min_digits <= max_digits <= {limit}, got {min_digits}, {max_digits}")
    return (0 if min_digits == 1 else 10 ** (min_digits - 1)), 10**max_digits


def count_borrows(a: int, b: int) -> int:
    """Borrows in the column subtraction a - b (a >= b >= 0)."""
    borrows = borrow = 0
    while a or b:
        borrow = 1 if a % 10 - b % 10 - borrow < 0 else 0
        borrows += borrow
        a, b = a // 10, b // 10
    return borrows


class Subtraction:
    """``a - b`` with ``a >= b``, fixed-width operands, the difference reversed.

    With ``max_digits = 3``: ``"385-047="`` -> ``"833"`` (338 written lowest digit first,
    zero-padded to 3 digits). ``difficulty`` = number of borrows. Operands are uniform on
    the integers with ``min_digits``..``max_digits`` digits; unordered pairs are unique
    across all splits and the larger operand comes first.
    """

    name = "subtraction"
    alphabet = "0123456789-="
    prompt_pattern = re.compile(r"[0-9]+-[0-9]+=")

    def __init__(self, min_digits: int = 1, max_digits: int = 2):
        _operand_range(min_digits, max_digits)
        self.min_digits, self.max_digits = min_digits, max_digits

    @property
    def max_answer_length(self) -> int:
        """Characters in the longest canonical answer (EOS not counted)."""
        return self.max_digits

    def problem(self, a: int, b: int) -> Problem:
        """The problem ``max(a, b) - min(a, b)``."""
        a, b = max(a, b), min(a, b)
        w = self.max_digits
        if b < 0 or a >= 10**w:
            raise ValueError(f"operands must be in [0, 10**{w}), got {a}, {b}")
        return Problem(f"{a:0{w}d}-{b:0{w}d}=", str(a - b).zfill(w)[::-1], count_borrows(a, b))

    def make_splits(self, seed: int, num_train: int, num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
        """Disjoint splits, a pure function of the arguments and the options."""
        _check_sizes(num_train, num_dev, num_eval)
        lo, hi = _operand_range(self.min_digits, self.max_digits)
        n = hi - lo
        total = num_train + num_dev + num_eval
        if total > 0.9 * n * (n + 1) // 2:
            raise ValueError(f"{total} problems requested but only {n * (n + 1) // 2} distinct pairs exist; use more digits")
        rng = random.Random(f"sapo-lab-subtraction-{seed}")
        seen: set[tuple[int, int]] = set()
        problems = []
        while len(problems) < total:
            x, y = rng.randrange(lo, hi), rng.randrange(lo, hi)
            key = (max(x, y), min(x, y))
            if key not in seen:
                seen.add(key)
                problems.append(self.problem(*key))
        return split_eval_first(problems, num_dev, num_eval)

    def verify(self, completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
        """Digits only; exactly ``max_digits`` reversed digits is correct."""
        return digit_verdict(completion_text, finished, problem.answer)


class _DigitStringTask:
    """Shared split logic for tasks on a random digit string whose length is the difficulty.

    The length is drawn uniformly from ``min_length``..``max_length`` (so every level is
    equally represented), then the digits uniformly; strings are unique across splits.
    """

    name = ""
    marker = ""
    alphabet = ""

    def __init__(self, min_length: int = 4, max_length: int = 7):
        if not 1 <= min_length <= max_length <= 20:
            raise ValueError(f"need 1 <= min_length <= max_length <= 20, got {min_length}, {max_length}")
        self.min_length, self.max_length = min_length, max_length
        self.prompt_pattern = re.compile(re.escape(self.marker) + r"[0-9]+=")

    @property
    def max_answer_length(self) -> int:
        """Characters in the longest canonical answer (EOS not counted)."""
        return self.max_length

    def answer_for(self, digits: str) -> str:
        """The canonical answer for the digit string (each family defines it)."""
        raise NotImplementedError

    def problem(self, digits: str) -> Problem:
        """The problem on the digit string ``digits``; ``difficulty`` = its length."""
        if not digits.isascii() or not digits.isdigit():
            raise ValueError(f"not a digit string: {digits!r}")
        return Problem(f"{self.marker}{digits}=", self.answer_for(digits), len(digits))

    def make_splits(self, seed: int, num_train: int, num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
        """Disjoint splits, a pure function of the arguments and the options."""
        _check_sizes(num_train, num_dev, num_eval)
        lengths = range(self.min_length, self.max_length + 1)
        total = num_train + num_dev + num_eval
        per_level = total / len(lengths)
        if per_level > 0.5 * 10**self.min_length:  # uniform levels: the shortest must not run out
            raise ValueError(
                f"{total} problems over lengths {self.min_length}..{self.max_length}: length {self.min_length} "
                f"has only {10**self.min_length} strings; raise min_length"
            )
        rng = random.Random(f"sapo-lab-{self.name}-{seed}")
        seen: set[str] = set()
        problems = []
        while len(problems) < total:
            n = rng.choice(lengths)
            digits = "".join(rng.choice(DIGITS) for _ in range(n))
            if digits not in seen:
                seen.add(digits)
                problems.append(self.problem(digits))
        return split_eval_first(problems, num_dev, num_eval)

    def verify(self, completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
        """Digits only; exactly the canonical string is correct."""
        return digit_verdict(completion_text, finished, problem.answer)


class DigitSort(_DigitStringTask):
    """Sort the digits ascending: ``"s93142="`` -> ``"12349"``. ``difficulty`` = length."""

    name = "sorting"
    marker = "s"
    alphabet = "0123456789s="

    def answer_for(self, digits: str) -> str:
        """The digits in ascending order."""
        return "".join(sorted(digits))


class Reversal(_DigitStringTask):
    """Write the digits backwards: ``"r93142="`` -> ``"24139"``. ``difficulty`` = length."""

    name = "reversal"
    marker = "r"
    alphabet = "0123456789r="

    def answer_for(self, digits: str) -> str:
        """The digits in reverse order."""
        return digits[::-1]


def scratchpad_trace(a: int, b: int, width: int) -> str:
    """Column groups ``a_i b_i c_i t_i`` (t_i two digits: carry out, sum digit), lowest column first."""
    groups, carry = [], 0
    for i in range(width):
        da, db = a // 10**i % 10, b // 10**i % 10
        total = da + db + carry
        groups.append(f"{da}{db}{carry}{total:02d}")
        carry = total // 10
    return ",".join(groups)


class ScratchpadAddition:
    """Addition that shows its work: the long-output family (``7 * width + 1`` response tokens).

    ``"047+385:"`` -> ``"75012,48113,03104=2340"``: columns 7+5+0 = 12, 4+8+1 = 13,
    0+3+1 = 04, then the reversed sum. ``difficulty`` = number of carries. Operands are
    uniform on ``[0, 10**width)``, pairs unique across splits.
    """

    name = "scratchpad_addition"
    alphabet = "0123456789+:,="
    prompt_pattern = re.compile(r"[0-9]+\+[0-9]+:")
    answer_pattern = re.compile(r"([0-9,]*)=([0-9]+)")

    def __init__(self, width: int = 3, check_trace: bool = True):
        if not 1 <= width <= 6:
            raise ValueError(f"width must be in [1, 6], got {width}")
        self.width, self.check_trace = width, bool(check_trace)

    @property
    def max_answer_length(self) -> int:
        """Characters in the canonical answer (EOS not counted): 5w + (w-1) + 1 + (w+1)."""
        return 7 * self.width + 1

    def problem(self, a: int, b: int) -> Problem:
        """The problem ``a + b`` with its full canonical trace."""
        w = self.width
        if min(a, b) < 0 or max(a, b) >= 10**w:
            raise ValueError(f"operands must be in [0, 10**{w}), got {a}, {b}")
        answer = f"{scratchpad_trace(a, b, w)}={reversed_sum(a, b, w)}"
        return Problem(f"{a:0{w}d}+{b:0{w}d}:", answer, count_carries(a, b))

    def make_splits(self, seed: int, num_train: int, num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
        """Disjoint splits, a pure function of the arguments and the options."""
        _check_sizes(num_train, num_dev, num_eval)
        space = 10 ** (2 * self.width)
        total = num_train + num_dev + num_eval
        if total > 0.9 * space:
            raise ValueError(f"{total} problems requested but only {space} distinct pairs exist; use a larger width")
        rng = random.Random(f"sapo-lab-scratchpad-{seed}")
        seen: set[tuple[int, int]] = set()
        problems = []
        while len(problems) < total:
            key = (rng.randrange(10**self.width), rng.randrange(10**self.width))
            if key not in seen:
                seen.add(key)
                problems.append(self.problem(*key))
        return split_eval_first(problems, num_dev, num_eval)

    def verify(self, completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
        """Rules 1-4; the format is ``TRACE=ANSWER`` with digits and commas in the trace."""
        if not finished:
            return 0.0, "truncated"
        text = completion_text.strip()
        m = self.answer_pattern.fullmatch(text) if text.isascii() else None
        if m is None:
            return 0.0, "invalid"
        trace, answer = m.groups()
        want_trace, want_answer = problem.answer.split("=")
        if answer != want_answer:
            return 0.0, "wrong"
        if self.check_trace and trace != want_trace:
            return 0.0, "wrong_trace"
        return 1.0, "correct"


def carry_free_sum(a: int, b: int, width: int) -> str:
    """The reversed sum with every carry dropped (column digits added mod 10): a systematic error."""
    return "".join(str((a // 10**i % 10 + b // 10**i % 10) % 10) for i in range(width)) + "0"


class CarryDroppedColdStart:
    """Addition whose *training labels* carry a known systematic error; its verifier does not.

    A cold start with a known flaw for the cost-of-conservatism study (review 14.5): in
    the ``train`` split, a fraction ``corrupt_fraction`` of the problems that have a carry
    get the carry-free answer (``carry_free_sum``: 47+85 labelled ``"220"`` instead of
    ``"231"``), chosen by a seeded draw. Supervised warm-up on ``train`` therefore learns
    to drop carries some of the time. ``dev`` and ``eval`` are untouched, and ``verify``
    recomputes the true sum from the prompt, so RL rewards only the right answer. The
    verifier names the systematic error: ``carry_dropped`` (reward 0) when a completion
    is the carry-free answer of a problem that has a carry, so the per-step ``reasons``
    show how fast a method removes it. ``difficulty`` = number of carries.
    """

    name = "addition_carry_dropped"
    alphabet = "0123456789+="
    prompt_pattern = re.compile(r"[0-9]+\+[0-9]+=")

    def __init__(self, min_digits: int = 1, max_digits: int = 2, corrupt_fraction: float = 0.5):
        _operand_range(min_digits, max_digits)
        if not 0.0 <= corrupt_fraction <= 1.0:
            raise ValueError(f"corrupt_fraction must be in [0, 1], got {corrupt_fraction}")
        self.min_digits, self.max_digits, self.corrupt_fraction = min_digits, max_digits, corrupt_fraction

    @property
    def max_answer_length(self) -> int:
        """Characters in the longest canonical answer (EOS not counted)."""
        return self.max_digits + 1

    def _operands(self, prompt: str) -> tuple[int, int]:
        a, b = prompt[:-1].split("+")
        return int(a), int(b)

    def make_splits(self, seed: int, num_train: int, num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
        """The addition splits, with the declared fraction of carrying train labels corrupted."""
        splits = addition.AdditionTask(self.min_digits, self.max_digits).make_splits(seed, num_train, num_dev, num_eval)
        rng = random.Random(f"sapo-lab-carry-dropped-{seed}")
        train = []
        for p in splits["train"]:
            if p.difficulty > 0 and rng.random() < self.corrupt_fraction:
                p = Problem(p.prompt, carry_free_sum(*self._operands(p.prompt), self.max_digits), p.difficulty)
            train.append(p)
        return {**splits, "train": train}

    def verify(self, completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
        """Rules 1-4 against the true sum recomputed from the prompt; ``carry_dropped`` names the flaw."""
        a, b = self._operands(problem.prompt)
        truth = reversed_sum(a, b, self.max_digits)
        reward, reason = digit_verdict(completion_text, finished, truth)
        if reason == "wrong" and count_carries(a, b) > 0 and completion_text.strip() == carry_free_sum(a, b, self.max_digits):
            return 0.0, "carry_dropped"
        return reward, reason


def _family_seed(seed: int, family: str) -> int:
    """Independent, stable seeds per family (Python's hash() is salted per process)."""
    return int(hashlib.sha256(f"sapo-lab-suite-{seed}-{family}".encode()).hexdigest()[:12], 16)


def allocate(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Split ``total`` into integer counts proportional to ``weights`` (largest remainder).

    Ties in the remainder go to the family listed first, so the result is deterministic.
    """
    norm = sum(weights.values())
    exact = {f: total * w / norm for f, w in weights.items()}
    counts = {f: int(x) for f, x in exact.items()}
    order = sorted(weights, key=lambda f: (-(exact[f] - counts[f]), list(weights).index(f)))
    for f in order[: total - sum(counts.values())]:
        counts[f] += 1
    return counts


class MixedSuite:
    """Several families in one task, each split allocated by a declared weight.

    ``families`` maps family names (``FAMILIES``) to their options; ``weights`` to
    non-negative weights (default: equal). Every split holds ``allocate(n, weights)``
    problems of each family, drawn by that family with its own seed derived from
    ``seed``, then shuffled together, so training draws families in proportion to their
    weights and evaluation can be broken down by :meth:`family_of`. ``difficulty`` is the
    family's own. The weights are also those of the aggregate in
    :func:`sapo_lab.studies.per_family.breakdown`.
    """

    name = "suite"

    def __init__(self, families: dict | None = None, weights: dict | None = None):
        families = dict(families or {"addition": {}, "subtraction": {}, "sorting": {}, "reversal": {}})
        unknown = sorted(set(families) - set(FAMILIES))
        if unknown:
            raise ValueError(f"unknown task family {unknown[0]!r}; known: {sorted(FAMILIES)}")
        weights = dict(weights or dict.fromkeys(families, 1.0))
        if set(weights) != set(families):
            raise ValueError(f"weights must name exactly the families {sorted(families)}, got {sorted(weights)}")
        if any(not isinstance(w, (int, float)) or w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
            raise ValueError(f"weights must be non-negative numbers with a positive sum, got {weights}")
        self.families = {name: FAMILIES[name](**(opts or {})) for name, opts in families.items()}
        self.weights = {name: float(weights[name]) for name in families}
        self.alphabet = "".join(dict.fromkeys("".join(t.alphabet for t in self.families.values())))

    @property
    def max_answer_length(self) -> int:
        """The longest canonical answer over the families with positive weight."""
        return max(t.max_answer_length for f, t in self.families.items() if self.weights[f] > 0)

    def family_of(self, problem: Problem) -> str:
        """The family whose prompt format ``problem.prompt`` has."""
        for name, fam in self.families.items():
            if fam.prompt_pattern.fullmatch(problem.prompt):
                return name
        raise ValueError(f"prompt {problem.prompt!r} belongs to no family of this suite")

    def make_splits(self, seed: int, num_train: int, num_dev: int, num_eval: int) -> dict[str, list[Problem]]:
        """Disjoint splits; each family's share is fixed by the weights, eval first as everywhere."""
        _check_sizes(num_train, num_dev, num_eval)
        sizes = {"train": num_train, "dev": num_dev, "eval": num_eval}
        counts = {split: allocate(n, self.weights) for split, n in sizes.items()}
        out: dict[str, list[Problem]] = {"train": [], "dev": [], "eval": []}
        for name, fam in self.families.items():
            if self.weights[name] == 0:
                continue
            need = {split: counts[split][name] for split in sizes}
            if min(need.values()) < 1:
                raise ValueError(f"family {name!r} gets no {min(need, key=need.get)} problems at these sizes; raise them")
            part = fam.make_splits(_family_seed(seed, name), need["train"], need["dev"], need["eval"])
            for split in out:
                out[split] += part[split]
        for split, probs in out.items():
            random.Random(f"sapo-lab-suite-order-{seed}-{split}").shuffle(probs)
        return out

    def verify(self, completion_text: str, finished: bool, problem: Problem) -> tuple[float, str]:
        """The verifier of the problem's family."""
        return self.families[self.family_of(problem)].verify(completion_text, finished, problem)


# Families the mix can draw from; "addition" is the package's own task.
FAMILIES = {
    "addition": addition.AdditionTask,
    "subtraction": Subtraction,
    "sorting": DigitSort,
    "reversal": Reversal,
    "scratchpad_addition": ScratchpadAddition,
}

# Registered below under these names ("addition" is registered by tasks/addition.py).
SUITE_TASKS = {
    "subtraction": Subtraction,
    "sorting": DigitSort,
    "reversal": Reversal,
    "scratchpad_addition": ScratchpadAddition,
    "addition_carry_dropped": CarryDroppedColdStart,
    "suite": MixedSuite,
}


for _name, _cls in SUITE_TASKS.items():
    register_task(_name)(_cls)
