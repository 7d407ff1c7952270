"""Algorithm 3 of the review: check a loss's derivative three independent ways.

For one token with current log-prob ``l`` and behavior log-prob ``l - z`` (so the
ratio is ``e^z``), the SAPO minimization loss must have d loss / d l = -A r w_tau(r).
We compare a symmetric finite difference, autograd, and that closed form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .gates import update_coefficient
from .losses import policy_loss

DEFAULT_RATIOS = (0.25, 0.5, 0.9, 1.0, 1.1, 2.0, 4.0)


@dataclass
class AuditTable:
    """Rows of an audit (one per case) and the largest error among them."""

    rows: list

    @property
    def max_error(self) -> float:
        return max(max(r["err_fd"], r["err_autograd"]) for r in self.rows)

    def to_markdown(self) -> str:
        cols = ["tau", "A", "ratio", "finite_diff", "autograd", "closed_form", "err_fd", "err_autograd"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in self.rows:
            lines.append("| " + " | ".join(
                f"{r[c]:.3g}" if c.startswith("err") else f"{r[c]:.6f}" for c in cols) + " |")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_markdown()

    def _repr_markdown_(self) -> str:
        return self.to_markdown()


def _single_token_loss(current_logp: torch.Tensor, behavior_logp: float, adv: float, tau: float, loss_fn):
    logp = current_logp.reshape(1, 1)
    behavior = torch.full_like(logp, behavior_logp)
    mask = torch.ones_like(logp, dtype=torch.bool)
    a = torch.full((1,), adv, dtype=logp.dtype)
    return loss_fn(logp, behavior, a, mask, tau)


def _sapo(logp, behavior, a, mask, tau):
    return policy_loss(logp, behavior, a, mask, loss_type="sapo", tau_pos=tau, tau_neg=tau,
                       compute_stats=False).loss


def gradient_audit(ratios=DEFAULT_RATIOS, advantages=(1.0, -1.0), taus=(1.0, 1.05), *,
                   current_logp: float = -1.3, step: float = 1e-6, loss_fn=None) -> AuditTable:
    """Audit d loss / d logp for every (tau, A, ratio) combination, in float64.

    ``loss_fn(logp, behavior_logp, advantages, mask, tau) -> scalar`` defaults to
    ``policy_loss(..., loss_type="sapo")``; pass another (e.g. one from
    :mod:`sapo_lab.objective.planted_mistakes`) to see where it departs from -A r w(r).
    """
    loss_fn = loss_fn or _sapo
    rows = []
    for tau in taus:
        for adv in advantages:
            for ratio in ratios:
                behavior = current_logp - math.log(ratio)
                x = torch.tensor(current_logp, dtype=torch.float64, requires_grad=True)
                loss = _single_token_loss(x, behavior, adv, tau, loss_fn)
                (auto,) = torch.autograd.grad(loss, x)
                with torch.no_grad():
                    up = _single_token_loss(torch.tensor(current_logp + step, dtype=torch.float64), behavior, adv, tau, loss_fn)
                    down = _single_token_loss(torch.tensor(current_logp - step, dtype=torch.float64), behavior, adv, tau, loss_fn)
                fd = float((up - down) / (2 * step))
                closed = -adv * float(update_coefficient(torch.tensor(ratio, dtype=torch.float64), tau))
                rows.append(dict(tau=tau, A=adv, ratio=ratio, finite_diff=fd, autograd=float(auto),
                                 closed_form=closed, err_fd=abs(fd - closed), err_autograd=abs(float(auto) - closed)))
    return AuditTable(rows)
