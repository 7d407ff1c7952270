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

from .rollout import encode_prompts, sample
from .task import Problem, verify


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


@torch.no_grad()
def generate_answers(
    model, tokenizer, problems, *, num_samples, temperature, max_completion_length, generator=None, batch_size=1024
):
    """(rewards, reasons) lists of length len(problems) * num_samples, grouped by problem."""
    device = next(model.parameters()).device
    prompts = [p.prompt for p in problems for _ in range(num_samples)]
    owners = [p for p in problems for _ in range(num_samples)]
    rewards, reasons = [], []
    for start in range(0, len(prompts), batch_size):
        ids, mask = encode_prompts(tokenizer, prompts[start : start + batch_size], device)
        comp, cmask, _, _, finished = sample(
            model,
            ids,
            mask,
            max_new_tokens=max_completion_length,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            temperature=temperature,
            generator=generator,
        )
        for j, (row, m, fin) in enumerate(zip(comp.tolist(), cmask.tolist(), finished.tolist(), strict=True)):
            toks = [t for t, keep in zip(row, m, strict=True) if keep]
            text = tokenizer.decode(toks[:-1] if fin else toks, skip_special_tokens=False)
            r, why = verify(text, fin, owners[start + j])
            rewards.append(r)
            reasons.append(why)
    return rewards, reasons


def evaluate(
    model,
    tokenizer,
    problems: list[Problem],
    *,
    num_samples: int = 4,
    temperature: float = 1.0,
    max_completion_length: int = 6,
    pass_k=(1,),
    greedy: bool = True,
    seed: int = 0,
) -> dict:
    """Pass@1 (with CI), pass@k, greedy accuracy and a per-difficulty breakdown."""
    if not problems:
        raise ValueError("no problems to evaluate")
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    rewards, reasons = generate_answers(
        model,
        tokenizer,
        problems,
        num_samples=num_samples,
        temperature=temperature,
        max_completion_length=max_completion_length,
        generator=gen,
    )
    per_prompt = [rewards[i * num_samples : (i + 1) * num_samples] for i in range(len(problems))]
    rates = [sum(r) / num_samples for r in per_prompt]
    p1, lo, hi = mean_ci(rates)
    out = {
        "pass1": p1,
        "pass1_ci95": [lo, hi],
        "num_prompts": len(problems),
        "num_samples": num_samples,
        "temperature": temperature,
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
        g_rewards, _ = generate_answers(
            model, tokenizer, problems, num_samples=1, temperature=0.0, max_completion_length=max_completion_length
        )
        out["greedy_accuracy"] = sum(g_rewards) / len(problems)
        for d in out["by_difficulty"]:
            sel = [r for p, r in zip(problems, g_rewards, strict=True) if str(p.difficulty) == d]
            out["by_difficulty"][d]["greedy_accuracy"] = sum(sel) / len(sel)
    return out
