"""Pass@1 broken down by task family and difficulty, a declared-weight aggregate, and pass@k.

The input is one :class:`ScoredPrompt` per held-out prompt: its family, its difficulty and
whether each of its n samples was correct. Every cell of the breakdown is the mean over
its prompts of the per-prompt success rate, with the 95% interval of
:func:`sapo_lab.training.evaluation.mean_ci` (prompts are the independent units). pass@k uses the
unbiased estimator :func:`sapo_lab.training.evaluation.pass_at_k`.

The weighted aggregate is ``sum_f w_f * Pass@1_f`` with the weights declared in advance
(normalised to sum to 1), not the pooled mean over prompts: a suite whose eval split
over-represents one family would otherwise let that family dominate. Its interval is the
stratified one: the families are independent samples, so
``se^2 = sum_f w_f^2 * s_f^2 / n_f`` with ``s_f^2`` the sample variance of the per-prompt
rates in family f.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from dataclasses import dataclass

from ..tasks import family_of as task_family
from ..training.evaluation import eval_generator, generate_answers, mean_ci, pass_at_k


@dataclass(frozen=True)
class ScoredPrompt:
    """One evaluated prompt: its family, difficulty and the verdict of each sample."""

    family: str
    difficulty: int
    correct: tuple[bool, ...]  # one entry per sample; True exactly when the verifier said "correct"

    @property
    def rate(self) -> float:
        """Fraction of this prompt's samples that are correct."""
        return sum(self.correct) / len(self.correct)


def _cell(records: list[ScoredPrompt], ks=()) -> dict:
    p1, lo, hi = mean_ci([r.rate for r in records])
    out = {"pass1": p1, "pass1_ci95": [lo, hi], "num_prompts": len(records), "num_samples": sum(len(r.correct) for r in records)}
    for k in ks:
        if k > 1:
            out[f"pass@{k}"] = mean_pass_at_k(records, k)
    return out


def mean_pass_at_k(records: list[ScoredPrompt], k: int) -> float:
    """Mean over prompts of the unbiased pass@k from each prompt's n samples (needs n >= k)."""
    if not records:
        raise ValueError("no prompts")
    return sum(pass_at_k(len(r.correct), sum(r.correct), k) for r in records) / len(records)


def group_by(records: list[ScoredPrompt], key) -> dict[str, list[ScoredPrompt]]:
    """Records grouped by ``key(record) -> str``, keys sorted."""
    groups: dict[str, list[ScoredPrompt]] = defaultdict(list)
    for r in records:
        groups[key(r)].append(r)
    return dict(sorted(groups.items()))


def weighted_pass1(records: list[ScoredPrompt], weights: dict[str, float], z: float = 1.96) -> dict:
    """Declared-weight aggregate of per-family Pass@1 with its stratified 95% interval."""
    families = group_by(records, lambda r: r.family)
    missing = sorted(f for f, w in weights.items() if w > 0 and f not in families)
    if missing:
        raise ValueError(f"weighted family {missing[0]!r} has no scored prompts")
    extra = sorted(set(families) - set(weights))
    if extra:
        raise ValueError(f"family {extra[0]!r} has scored prompts but no declared weight")
    total = sum(weights.values())
    if total <= 0 or any(w < 0 for w in weights.values()):
        raise ValueError(f"weights must be non-negative with a positive sum, got {weights}")
    mean = var = 0.0
    for fam, w in weights.items():
        if w == 0:
            continue
        w /= total
        rates = [r.rate for r in families[fam]]
        m = sum(rates) / len(rates)
        s2 = sum((x - m) ** 2 for x in rates) / (len(rates) - 1) if len(rates) > 1 else 0.0
        mean += w * m
        var += w * w * s2 / len(rates)
    half = z * math.sqrt(var)
    return {
        "pass1": mean,
        "pass1_ci95": [max(0.0, mean - half), min(1.0, mean + half)],
        "weights": {f: w / total for f, w in weights.items()},
    }


def breakdown(records: list[ScoredPrompt], weights: dict[str, float] | None = None, pass_k=(1,)) -> dict:
    """Overall, per-family, per-difficulty and per-(family, difficulty) Pass@1, and the weighted aggregate.

    ``weights`` default to equal weights over the families present. Difficulty keys are
    strings (JSON); within a mix, ``by_difficulty`` pools levels of different families,
    whose scales differ, so ``by_family_difficulty`` is the table to read.
    """
    if not records:
        raise ValueError("no scored prompts")
    if weights is None:
        weights = dict.fromkeys(sorted({r.family for r in records}), 1.0)
    return {
        "overall": _cell(records, pass_k),
        "weighted": weighted_pass1(records, weights),
        "by_family": {f: _cell(v, pass_k) for f, v in group_by(records, lambda r: r.family).items()},
        "by_difficulty": {
            d: _cell(v, pass_k)
            for d, v in sorted(group_by(records, lambda r: str(r.difficulty)).items(), key=lambda kv: int(kv[0]))
        },
        "by_family_difficulty": {
            f: {
                d: _cell(v, pass_k)
                for d, v in sorted(group_by(rs, lambda r: str(r.difficulty)).items(), key=lambda kv: int(kv[0]))
            }
            for f, rs in group_by(records, lambda r: r.family).items()
        },
    }


def score_problems(
    model,
    tokenizer,
    task,
    problems,
    *,
    num_samples: int,
    temperature: float,
    max_completion_length: int,
    seed: int = 0,
    family_of=None,
) -> list[ScoredPrompt]:
    """Sample ``num_samples`` responses per problem and score them with ``task.verify``.

    The samples are drawn by held-out evaluation's own path
    (:func:`sapo_lab.training.evaluation.generate_answers`), so with the same seed and
    ``num_samples`` a breakdown scores exactly the samples that evaluation scored.
    ``family_of(problem)`` names each problem's family (default: the task's ``family_of``
    if it has one, else its name).
    """
    if family_of is None:
        family_of = functools.partial(task_family, task)
    _, reasons = generate_answers(
        model,
        tokenizer,
        problems,
        reward_fn=task.verify,
        num_samples=num_samples,
        temperature=temperature,
        max_completion_length=max_completion_length,
        generator=eval_generator(model, seed),
    )
    correct = [why == "correct" for why in reasons]
    return [
        ScoredPrompt(family_of(p), p.difficulty, tuple(correct[i * num_samples : (i + 1) * num_samples]))
        for i, p in enumerate(problems)
    ]
