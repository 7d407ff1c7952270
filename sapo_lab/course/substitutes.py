"""Plain-torch answers the grader puts in place of a student's other functions while it grades one part.

When part X is graded, the functions X may call (``masked_mean``, ``sapo_gate``, ...) are replaced in the
student's module by stand-ins for these, so a bug in ``masked_mean`` costs only the ``masked_mean`` part. The
stand-ins hold none of this code: they send their arguments to the grading process, which computes these functions
(``stand_ins.py``) and returns the answer and its gradient. Each is written from the handout's definitions with
torch alone; a test holds them to sapo_lab's references. The training part holds the student's loss to
:func:`sapo_loss` on the trainer's batches.
"""

import torch


def group_advantages(rewards, eps=1e-6):
    """Part 1 written plainly."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    std = centred.pow(2).mean(dim=1, keepdim=True).sqrt()
    return centred / (std + eps)


def masked_mean(values, mask, aggregation="per_response"):
    """Part 2 written plainly."""
    m = mask.to(values.dtype)
    if aggregation == "token_pool":
        return (values * m).sum() / m.sum()
    return ((values * m).sum(dim=-1) / m.sum(dim=-1)).mean()


def sapo_gate(ratio, tau):
    """Part 4 written plainly."""
    return (4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0))


def gspo_sequence_ratio(logp, behavior_logp, mask):
    """Part 6 written plainly."""
    m = mask.to(logp.dtype)
    return torch.exp(((logp - behavior_logp.detach()) * m).sum(dim=-1) / m.sum(dim=-1))


def clipped_surrogate_loss(logp, behavior_logp, advantages, mask, eps=0.2):
    """Part 3 written plainly."""
    r = torch.exp(logp - behavior_logp.detach())
    a = advantages[:, None]
    return masked_mean(-torch.minimum(r * a, r.clamp(1.0 - eps, 1.0 + eps) * a), mask)


def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
    """Part 5 written plainly."""
    r = torch.exp(logp - behavior_logp.detach())
    a = advantages[:, None].expand_as(logp)
    tau = torch.where(a > 0, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
    return masked_mean(-a * sapo_gate(r, tau), mask)


# the grading process of a part -> the parts it may substitute: those below it in the handout's dependency order
LEAVES = ("group_advantages", "masked_mean", "sapo_gate", "gspo_sequence_ratio")
PROCESSES = (
    (LEAVES, ()),
    (("clipped_surrogate_loss", "sapo_loss"), LEAVES),
    (("update_loss",), LEAVES + ("clipped_surrogate_loss", "sapo_loss")),
)
