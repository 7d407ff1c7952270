"""TEACHING ONLY: plausible-looking SAPO implementations that optimize something else.

Each function has the signature of the single-token audit
``loss_fn(logp, behavior_logp, advantages, mask, tau) -> scalar`` and uses
per-response averaging, so it can be dropped into :func:`sapo_lab.gradient_audit`
or compared with :func:`sapo_lab.policy_loss` on a batch. Do not train with them.
"""

from __future__ import annotations

import torch

from .gates import gate_weight, sapo_token_surrogate, token_temperatures, update_coefficient
from .losses import policy_loss
from .masks import masked_mean


def _adv_tau(advantages, logp, tau_pos, tau_neg):
    a = advantages.detach().to(logp.dtype)[:, None].expand_as(logp)
    tau = token_temperatures(a, tau_pos, tau_neg)
    return a, tau


def product_without_stop_gradient(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=None):
    """Loss -A * w(r) * r: autograd also differentiates w, giving A (w + r w') r grad log p."""
    tau_neg = tau_pos if tau_neg is None else tau_neg
    a, tau = _adv_tau(advantages, logp, tau_pos, tau_neg)
    r = torch.exp(logp - behavior_logp.detach())
    return masked_mean(-a * gate_weight(r, tau) * r, mask)


def fully_detached_weight(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=None):
    """Loss -sg(A r w(r)) * logp: right first derivative, wrong value and wrong second derivative.

    :func:`sapo_lab.gradient_audit` flags it through its finite-difference column:
    a finite difference knows nothing of stop-gradients, so it also differentiates the
    weight and disagrees with autograd. The scalar this returns is not a function
    whose derivative is the update it applies.
    """
    tau_neg = tau_pos if tau_neg is None else tau_neg
    a, tau = _adv_tau(advantages, logp, tau_pos, tau_neg)
    coef = update_coefficient(torch.exp(logp.detach() - behavior_logp.detach()), tau)
    return masked_mean(-(a * coef) * logp, mask)


def average_over_padding(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=None):
    """Correct SAPO token losses, but divided by the padded length instead of L_i.

    A single-token audit cannot see this mistake (there is no padding); it shows on
    batches with unequal lengths.
    """
    tau_neg = tau_pos if tau_neg is None else tau_neg
    a, tau = _adv_tau(advantages, logp, tau_pos, tau_neg)
    m = mask.to(logp.dtype)
    token_loss = -a * sapo_token_surrogate((logp - behavior_logp.detach()) * m, tau)
    return (token_loss * m).sum(dim=-1).div(logp.shape[-1]).mean()


def behavior_recomputed_from_current(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=None):
    """Uses the current policy's own (detached) log-probs as 'behavior': every ratio is 1."""
    tau_neg = tau_pos if tau_neg is None else tau_neg
    return policy_loss(logp, logp.detach(), advantages, mask, tau_pos=tau_pos, tau_neg=tau_neg,
                       compute_stats=False).loss


WRONG_IMPLEMENTATIONS = {
    "product without stop-gradient": product_without_stop_gradient,
    "fully detached weight": fully_detached_weight,
    "average over padding": average_over_padding,
    "behavior recomputed from current policy": behavior_recomputed_from_current,
}
