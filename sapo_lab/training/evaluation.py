"""Held-out evaluation: Pass@1 with a confidence interval, unbiased pass@k, greedy accuracy.

Pass@1 is the mean of n independent single-sample correctness indicators per prompt,
averaged over prompts: the probability that one sample succeeds. pass@k (k > 1) is the
probability that at least one of k samples succeeds, estimated without bias from the
same n samples by ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021). They are different
metrics and are reported under different names.

The interval treats prompts as the independent units (samples of one prompt are
correlated), so its standard error is that of the mean of per-prompt success rates.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import torch

from ..tasks import Problem, RewardFn
from .rollout import sample_and_score
from .seeds import dev_eval_seed, held_out_eval_seed


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_ci(values: list[float], z: float = 1.96) -> tuple[float, float, float]:
    """(mean, low, high) normal-approximation interval for the mean of ``values``."""
    m = len(values)
    if m == 0:
        raise ValueError("no values")
    mean = sum(values) / m
    if m == 1:
        return mean, mean, mean
    var = sum((v - mean) ** 2 for v in values) / (m - 1)
    half = z * math.sqrt(var / m)
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def eval_generator(model, seed: int) -> torch.Generator:
    """The sampling generator of one evaluation, on the model's device."""
    return torch.Generator(device=next(model.parameters()).device).manual_seed(seed)


@torch.no_grad()
def generate_answers(
    model,
    tokenizer,
    problems,
    *,
    reward_fn: RewardFn,
    num_samples,
    temperature,
    max_completion_length,
    generator=None,
    batch_size=1024,
):
    """(rewards, reasons) lists of length len(problems) * num_samples, grouped by problem.

    Each problem is repeated ``num_samples`` times and the rows are sampled in chunks of
    ``batch_size``: the chunking is part of the random-number order, so the per-family
    breakdown (:func:`sapo_lab.studies.per_family.score_problems`) samples through here too.
    """
    device = next(model.parameters()).device
    owners = [p for p in problems for _ in range(num_samples)]
    rewards, reasons = [], []
    for start in range(0, len(owners), batch_size):
        scored = sample_and_score(
            model,
            tokenizer,
            owners[start : start + batch_size],
            reward_fn=reward_fn,
            samples_per_prompt=1,
            max_completion_length=max_completion_length,
            temperature=temperature,
            generator=generator,
            device=device,
        )
        for ep in scored.episodes:
            rewards.append(ep.reward)
            reasons.append(ep.reason)
    return rewards, reasons


def evaluate(
    model,
    tokenizer,
    problems: list[Problem],
    *,
    reward_fn: RewardFn,
    num_samples: int = 4,
    temperature: float = 1.0,
    max_completion_length: int = 6,
    pass_k=(1,),
    greedy: bool = True,
    seed: int = 0,
) -> dict:
    """Pass@1 (with CI), pass@k, greedy accuracy and a per-difficulty breakdown.

    A sample is solved when ``reward_fn`` gives it the reason ``"correct"`` (the Task
    contract: full credit), so partial rewards never inflate Pass@1; ``reward_mean`` is
    the mean reward itself.
    """
    if not problems:
        raise ValueError("no problems to evaluate")
    gen = eval_generator(model, seed)
    rewards, reasons = generate_answers(
        model,
        tokenizer,
        problems,
        reward_fn=reward_fn,
        num_samples=num_samples,
        temperature=temperature,
        max_completion_length=max_completion_length,
        generator=gen,
    )
    solved = [1.0 if why == "correct" else 0.0 for why in reasons]
    per_prompt = [solved[i * num_samples : (i + 1) * num_samples] for i in range(len(problems))]
    rates = [sum(r) / num_samples for r in per_prompt]
    p1, lo, hi = mean_ci(rates)
    out = {
        "pass1": p1,
        "pass1_ci95": [lo, hi],
        "num_prompts": len(problems),
        "num_samples": num_samples,
        "temperature": temperature,
        "reward_mean": sum(rewards) / len(rewards),
        "reasons": dict(Counter(reasons)),
    }
    for k in pass_k:
        if k > 1:
            out[f"pass@{k}"] = sum(pass_at_k(num_samples, int(sum(r)), k) for r in per_prompt) / len(problems)
    by_diff = defaultdict(list)
    for p, rate in zip(problems, rates, strict=True):
        by_diff[p.difficulty].append(rate)
    out["by_difficulty"] = {str(d): {"pass1": sum(v) / len(v), "num_prompts": len(v)} for d, v in sorted(by_diff.items())}
    if greedy:
        _, g_reasons = generate_answers(
            model,
            tokenizer,
            problems,
            reward_fn=reward_fn,
            num_samples=1,
            temperature=0.0,
            max_completion_length=max_completion_length,
        )
        g_rewards = [1.0 if why == "correct" else 0.0 for why in g_reasons]
        out["greedy_accuracy"] = sum(g_rewards) / len(problems)
        for d in out["by_difficulty"]:
            sel = [r for p, r in zip(problems, g_rewards, strict=True) if str(p.difficulty) == d]
            out["by_difficulty"][d]["greedy_accuracy"] = sum(sel) / len(sel)
    return out


def eval_temperature(cfg) -> float:
    """The sampling temperature of held-out evaluation: ``evaluation.eval_temperature``, else the rollout's."""
    e = cfg.evaluation.eval_temperature
    return cfg.rollout.temperature if e is None else e


def held_out_eval(model, tok, cfg, problems: list[Problem], reward_fn: RewardFn, seed: int | None = None) -> dict:
    """:func:`evaluate` with a run config's evaluation settings (the cold-start and final reports, the ``eval`` command).

    ``seed`` defaults to :func:`sapo_lab.training.seeds.held_out_eval_seed` of the run seed.
    """
    e = cfg.evaluation
    return evaluate(
        model,
        tok,
        problems,
        reward_fn=reward_fn,
        num_samples=e.num_samples,
        temperature=eval_temperature(cfg),
        max_completion_length=cfg.rollout.max_completion_length,
        pass_k=e.pass_k,
        greedy=e.greedy,
        seed=held_out_eval_seed(cfg.seed) if seed is None else seed,
    )


def dev_pass1(model, tok, cfg, dev: list[Problem], reward_fn: RewardFn, step: int) -> float:
    """Sampled Pass@1 on the first ``evaluation.dev_prompts`` dev problems, one sample each (the per-step monitor)."""
    res = evaluate(
        model,
        tok,
        dev[: cfg.evaluation.dev_prompts],
        reward_fn=reward_fn,
        num_samples=1,
        temperature=eval_temperature(cfg),
        max_completion_length=cfg.rollout.max_completion_length,
        greedy=False,
        seed=dev_eval_seed(cfg.seed, step),
    )
    return res["pass1"]
