"""Write assignment/expected.json: the frozen inputs and outputs the grader compares a student's module with.

    python assignment/make_expected.py        # rewrites expected.json; commit it

Every expected output is computed with sapo_lab's own functions (group_advantages, masked_mean, soft_gate,
clip_token_surrogate via policy_loss) and, for the losses, cross-checked against ``sapo_lab.policy_loss``'s
gradient. Each part also freezes the outputs of its plausible mistakes, written here with plain torch, so the
grader can name the mistake whose outputs a failing function reproduces.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from sapo_lab import group_advantages, policy_loss
from sapo_lab.objective.gates import soft_gate
from sapo_lab.objective.masks import masked_mean

OUT = Path(__file__).resolve().parent / "expected.json"
torch.set_default_dtype(torch.float64)


# ---- inputs ------------------------------------------------------------------------------------------------
def batch(seed: int, prompts: int, group: int, tokens: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    n = prompts * group
    lengths = torch.randint(1, tokens + 1, (n,), generator=gen)
    lengths[0] = tokens  # one full-length and one single-token response in every batch
    lengths[-1] = 1
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).double()
    behavior = -1.5 + 0.6 * torch.randn(n, tokens, generator=gen)
    logp = behavior + 0.45 * torch.randn(n, tokens, generator=gen)  # ratios from about 0.3 to 3
    rewards = torch.randint(0, 2, (prompts, group), generator=gen).double()
    rewards[0] = 1.0  # a group with equal rewards: advantages exactly 0
    rewards[-1, 0], rewards[-1, 1:] = 1.0, 0.0  # a single success
    adv = group_advantages(rewards).reshape(-1)
    return dict(logp=logp, behavior_logp=behavior, mask=mask, rewards=rewards, advantages=adv)


CASES = [batch(11, 3, 4, 6), batch(12, 2, 5, 7), batch(13, 4, 2, 5)]


# ---- reference (sapo_lab) and mistakes (plain torch) -------------------------------------------------------
def per_response(values, mask):
    return masked_mean(values, mask, "per_response")


def token_pool(values, mask):
    return masked_mean(values, mask, "token_pool")


def ref_advantages(rewards, eps=1e-6):
    return group_advantages(rewards, eps)


def ref_masked_mean(values, mask, aggregation="per_response"):
    return masked_mean(values, mask, aggregation)


def clip_loss(logp, behavior_logp, advantages, mask, eps=0.2, *, agg=per_response, use_max=False, clip=True,
              detach=True):
    b = behavior_logp.detach() if detach else behavior_logp
    r = torch.exp(logp - b)
    a = advantages[:, None]
    clipped = torch.clamp(r, 1 - eps, 1 + eps) if clip else r
    pick = torch.maximum if use_max else torch.minimum
    return agg(-pick(r * a, clipped * a), mask)


def sapo_token_loss(logp, behavior_logp, advantages, tau_pos, tau_neg, *, swap=False, single=False,
                    prefactor=True, sign=-1.0, detach=True):
    b = behavior_logp.detach() if detach else behavior_logp
    r = torch.exp(logp - b)
    a = advantages[:, None].expand_as(logp)
    pos, neg = (tau_neg, tau_pos) if swap else (tau_pos, tau_neg)
    if single:
        neg = pos
    tau = torch.where(a > 0, torch.full_like(a, pos), torch.full_like(a, neg))
    f = soft_gate(r, tau) if prefactor else torch.sigmoid(tau * (r - 1))
    return sign * a * f


def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05, *, agg=per_response, **kw):
    return agg(sapo_token_loss(logp, behavior_logp, advantages, tau_pos, tau_neg, **kw), mask)


def seq_ratio(logp, behavior_logp, mask, *, padded=False, total=False, mean_of_ratios=False):
    z = (logp - behavior_logp.detach())
    m = torch.ones_like(mask) if padded else mask
    if mean_of_ratios:
        return (torch.exp(z) * m).sum(-1) / m.sum(-1)
    s = (z * m).sum(-1)
    return torch.exp(s if total else s / m.sum(-1))


def update(logp, behavior_logp, rewards, mask, tau_pos=1.0, tau_neg=1.05, *, adv=ref_advantages, **kw):
    return sapo_loss(logp, behavior_logp, adv(rewards).reshape(-1), mask, tau_pos, tau_neg, **kw)


def batch_advantages(rewards, eps=1e-6):
    flat = rewards.reshape(1, -1)
    return group_advantages(flat, eps).reshape(rewards.shape)


def sample_std_advantages(rewards, eps=1e-6):
    c = rewards - rewards.mean(1, keepdim=True)
    return c / (rewards.std(1, keepdim=True) + eps)


def centred_only(rewards, eps=1e-6):
    return rewards - rewards.mean(1, keepdim=True)


def swapped_mean(values, mask, aggregation="per_response"):
    return masked_mean(values, mask, "token_pool" if aggregation == "per_response" else "per_response")


def padded_mean(values, mask, aggregation="per_response"):
    v = values * mask
    return v.mean() if aggregation == "token_pool" else v.mean(-1).mean()


NOT_DETACHED = "behaviour log-probs not detached (gradient flows into the old policy)"
TOKEN_POOL = "one token pool instead of per-response averaging"
# part -> (reference, {mistake: implementation})
PARTS = {
    "group_advantages": (ref_advantages, {
        "sample std (divided by G - 1) instead of the population std": sample_std_advantages,
        "not divided by the group's std (mean-centred only)": centred_only,
        "mean and std over the whole batch instead of within each group": batch_advantages,
    }),
    "masked_mean": (ref_masked_mean, {
        "the two aggregations swapped": swapped_mean,
        "padding counted in the average (divided by T, not by the response length)": padded_mean,
    }),
    "clipped_surrogate_loss": (clip_loss, {
        "max instead of min (the pessimistic bound reversed)": lambda *a: clip_loss(*a, use_max=True),
        "no clipping (the plain ratio surrogate)": lambda *a: clip_loss(*a, clip=False),
        TOKEN_POOL: lambda *a: clip_loss(*a, agg=token_pool),
        NOT_DETACHED: lambda *a: clip_loss(*a, detach=False),
    }),
    "sapo_gate": (lambda r, tau: soft_gate(r, tau), {
        "the 4/tau prefactor missing": lambda r, tau: torch.sigmoid(tau * (r - 1)),
        "sigmoid of tau * r instead of tau * (r - 1)": lambda r, tau: (4 / tau) * torch.sigmoid(tau * r),
    }),
    "sapo_loss": (sapo_loss, {
        "tau_pos and tau_neg swapped": lambda *a: sapo_loss(*a, swap=True),
        "tau_pos used for every token": lambda *a: sapo_loss(*a, single=True),
        "the 4/tau prefactor missing": lambda *a: sapo_loss(*a, prefactor=False),
        "sign error (+A f(r) minimized)": lambda *a: sapo_loss(*a, sign=1.0),
        TOKEN_POOL: lambda *a: sapo_loss(*a, agg=token_pool),
        NOT_DETACHED: lambda *a: sapo_loss(*a, detach=False),
    }),
    "gspo_sequence_ratio": (seq_ratio, {
        "padding included in the mean log ratio": lambda *a: seq_ratio(*a, padded=True),
        "sum of log ratios instead of their mean (the product of token ratios)": lambda *a: seq_ratio(*a, total=True),
        "mean of the token ratios instead of exp of the mean log ratio": lambda *a: seq_ratio(*a, mean_of_ratios=True),
    }),
    "update_loss": (update, {
        "advantages normalised over the whole batch instead of per group": lambda *a: update(*a, adv=batch_advantages),
        "sample std in the advantages": lambda *a: update(*a, adv=sample_std_advantages),
        TOKEN_POOL: lambda *a: update(*a, agg=token_pool),
        "tau_pos and tau_neg swapped": lambda *a: update(*a, swap=True),
    }),
}


# ---- what each part is called with, and what is recorded -----------------------------------------------------
def arguments(part: str, case: dict) -> dict:
    """The keyword arguments of one call (tensors as given to the student)."""
    c = case
    if part == "group_advantages":
        return {"rewards": c["rewards"]}
    if part == "masked_mean":
        return {"values": c["logp"], "mask": c["mask"]}  # called once per aggregation
    if part == "sapo_gate":
        return {"ratio": torch.exp(c["logp"] - c["behavior_logp"]).reshape(-1), "tau": 1.05}
    common = {"logp": c["logp"], "behavior_logp": c["behavior_logp"], "mask": c["mask"]}
    if part == "clipped_surrogate_loss":
        return {**common, "advantages": c["advantages"], "eps": 0.2}
    if part == "sapo_loss":
        return {**common, "advantages": c["advantages"], "tau_pos": 1.0, "tau_neg": 1.05}
    if part == "gspo_sequence_ratio":
        return common
    if part == "update_loss":
        return {**common, "rewards": c["rewards"], "tau_pos": 1.0, "tau_neg": 1.05}
    raise KeyError(part)


def record(part: str, fn, kwargs: dict) -> dict:
    """The outputs the grader compares: values, and for differentiable parts the gradients with respect to
    ``logp`` and ``behavior_logp`` (None where none flows)."""
    from sapo_lab.course.grader import observe

    return observe(part, fn, kwargs)


def main() -> int:
    from sapo_lab.course.grader import positional

    parts = {}
    for part, (ref, mistakes) in PARTS.items():
        cases = []
        for case in CASES:
            kwargs = arguments(part, case)
            expected = record(part, lambda *a, f=ref, p=part, **k: f(*positional(p, a, k)), kwargs)
            wrong = {}
            for name, fn in mistakes.items():
                out = record(part, lambda *a, f=fn, p=part, **k: f(*positional(p, a, k)), kwargs)
                if out == expected:
                    print(f"error: {part}: the mistake {name!r} gives the right outputs", file=sys.stderr)
                    return 1
                wrong[name] = out
            cases.append({"inputs": {k: v.tolist() if torch.is_tensor(v) else v for k, v in kwargs.items()},
                          "expected": expected, "mistakes": wrong})
        parts[part] = cases
    # the frozen SAPO loss is sapo_lab's: same gradient as policy_loss(loss_type="sapo")
    for case in CASES:
        logp = case["logp"].clone().requires_grad_(True)
        (g,) = torch.autograd.grad(policy_loss(logp, case["behavior_logp"], case["advantages"], case["mask"],
                                               loss_type="sapo", tau_pos=1.0, tau_neg=1.05).loss, logp)
        logp2 = case["logp"].clone().requires_grad_(True)
        (g2,) = torch.autograd.grad(sapo_loss(logp2, case["behavior_logp"], case["advantages"], case["mask"]), logp2)
        assert torch.allclose(g, g2, atol=1e-12), "the frozen SAPO loss departs from sapo_lab.policy_loss"
    OUT.write_text(json.dumps({"generated_by": "assignment/make_expected.py", "parts": parts}, indent=0) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
