"""Write assignment/expected.json: the frozen inputs and outputs the grader compares a student's module with.

    python assignment/make_expected.py        # rewrites expected.json; commit it

Every expected output is computed with the grader's references (``sapo_lab.course.reference``, built on
sapo_lab's group_advantages, masked_mean and soft_gate; the same the grader uses for its fresh inputs) and, for
the losses, cross-checked against ``sapo_lab.policy_loss``'s gradient. The mistakes the grader names are not
frozen: it computes them from each case's inputs (``sapo_lab/course/mistakes.py``, shared with the book's checks).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from sapo_lab import policy_loss
from sapo_lab.course import reference
from sapo_lab.course.reference import REFERENCE, batch, sapo_loss

OUT = Path(__file__).resolve().parent / "expected.json"
torch.set_default_dtype(torch.float64)

CASES = [batch(11, 3, 4, 6), batch(12, 2, 5, 7), batch(13, 4, 2, 5)]


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
    for part, ref in REFERENCE.items():
        cases = []
        for case in CASES:
            kwargs = arguments(part, case)
            expected = record(part, lambda *a, f=ref, p=part, **k: f(*positional(p, a, k)), kwargs)
            cases.append({"inputs": {k: v.tolist() if torch.is_tensor(v) else v for k, v in kwargs.items()},
                          "expected": expected})
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
