"""Write assignment/expected.json: the frozen inputs and outputs the grader compares a student's module with.

    python assignment/make_expected.py        # rewrites expected.json; commit it

Every expected output is computed with the grader's references (``sapo_lab.course.reference``, built on
sapo_lab's group_advantages, masked_mean and soft_gate; the same the grader uses for its fresh inputs) and, for
the losses, cross-checked against ``sapo_lab.policy_loss``'s gradient. Each part also freezes the outputs of its
plausible mistakes, so the grader can name the mistake whose outputs a failing function reproduces.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from sapo_lab import group_advantages, policy_loss
from sapo_lab.course import reference
from sapo_lab.course.reference import batch, clip_loss, ref_advantages, ref_masked_mean, sapo_loss, seq_ratio, update
from sapo_lab.objective.gates import soft_gate
from sapo_lab.objective.masks import masked_mean

OUT = Path(__file__).resolve().parent / "expected.json"
torch.set_default_dtype(torch.float64)

CASES = [batch(11, 3, 4, 6), batch(12, 2, 5, 7), batch(13, 4, 2, 5)]


# ---- mistakes (plain torch over the reference's pieces) ------------------------------------------------------
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
        TOKEN_POOL: lambda *a: clip_loss(*a, agg=reference.token_pool),
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
        TOKEN_POOL: lambda *a: sapo_loss(*a, agg=reference.token_pool),
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
        TOKEN_POOL: lambda *a: update(*a, agg=reference.token_pool),
        "tau_pos and tau_neg swapped": lambda *a: update(*a, swap=True),
    }),
}


# ---- what each part is called with, and what is recorded -----------------------------------------------------
def arguments(part: str, case: dict) -> dict:
    """The keyword arguments of one call (tensors as given to the student)."""
    return reference.arguments(part, case)


def record(part: str, fn, kwargs: dict) -> dict:
    """The outputs the grader compares: values, and for differentiable parts the gradients with respect to
    ``logp`` and ``behavior_logp`` (None where none flows)."""
    from sapo_lab.course.sandbox import observe

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
