"""Chapter 10's coded exercises: SAPO's loss with both aggregations, and its gradient derived by hand."""

from __future__ import annotations

import torch

from ...objective.gates import gate_weight, token_temperatures
from ...objective.losses import policy_loss
from ...objective.masks import aggregation_weights
from ..checks import Exercise
from ..mistakes import SAPO_LOSS, Mistake, _aggregate, _ratio


def sapo_loss_reference(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05,
                        aggregation="per_response"):
    """sapo_lab's SAPO loss: the centred surrogate, masked and aggregated."""
    return policy_loss(logp, behavior_logp, advantages, mask, loss_type="sapo", tau_pos=tau_pos, tau_neg=tau_neg,
                       aggregation=aggregation, compute_stats=False).loss


def sapo_gradient_reference(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05,
                            aggregation="per_response"):
    """d loss / d logp of sapo_lab's SAPO loss, by autograd."""
    leaf = logp.detach().clone().requires_grad_(True)
    loss = sapo_loss_reference(leaf, behavior_logp.detach(), advantages, mask, tau_pos, tau_neg, aggregation)
    return torch.autograd.grad(loss, leaf)[0]


def _cases() -> list[dict]:
    """Padded responses (one of a single token), advantages of both signs and a zero one, ratios from about e^-2
    to e^2, distinct temperatures (so a swap shows), both aggregations."""
    gen = torch.Generator().manual_seed(1010)
    cases = []
    for aggregation, (tau_pos, tau_neg) in (("per_response", (1.0, 1.05)), ("token_pool", (0.5, 2.0)),
                                            ("per_response", (2.0, 0.7))):
        lengths = torch.tensor([5, 1, 3, 4, 2])
        mask = (torch.arange(5)[None, :] < lengths[:, None]).to(torch.float64)
        behavior = -1.2 + 0.5 * torch.randn(5, 5, generator=gen, dtype=torch.float64)
        logp = behavior + 0.8 * torch.randn(5, 5, generator=gen, dtype=torch.float64)
        advantages = torch.tensor([1.3, -0.6, 0.0, -1.1, 0.8], dtype=torch.float64)
        cases.append(dict(logp=logp, behavior_logp=behavior, advantages=advantages, mask=mask, tau_pos=tau_pos,
                          tau_neg=tau_neg, aggregation=aggregation))
    return cases


def _uncentred(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05, aggregation="per_response"):
    r = _ratio(logp, behavior_logp)
    a = advantages[:, None].expand_as(r)
    tau = token_temperatures(a, tau_pos, tau_neg)
    return _aggregate(-a * 4 / tau * torch.sigmoid(tau * (r - 1)), mask, aggregation)


def _planted(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05, aggregation="per_response", *,
             kind):
    """Chapter 10's two planted wrong losses built from the gate's derivative A r w(r): written as the loss
    itself (``kind="product"``), or detached and multiplied by logp (``kind="detached"``)."""
    r = _ratio(logp, behavior_logp)
    a = advantages[:, None].expand_as(r)
    weight = a * r * gate_weight(r, token_temperatures(a, tau_pos, tau_neg))
    per_token = -weight if kind == "product" else -weight.detach() * logp
    return _aggregate(per_token, mask, aggregation)


# the catalogue's SAPO-loss mistakes, made on the centred surrogate this chapter asks for
LOSS_MISTAKES = (*(Mistake(m.name, m.fix, lambda m=m, **kw: m.compute(**kw, centred=True)) for m in SAPO_LOSS),
                 Mistake(
    "the gate not centred: (4/tau) sigmoid(tau (r - 1)) without the - 1/2",
    "subtract 1/2 inside the bracket as this chapter does; the gradient is the same, but the centred loss is 0 "
    "on-policy, which is what this exercise and sapo_lab report", _uncentred),
                 Mistake("the gate's derivative A r w(r) written as the loss, with no stop-gradient",
                         "write the surrogate itself, -A (4/tau)[sigmoid(tau (r - 1)) - 1/2], and let autograd "
                         "differentiate it", lambda **kw: _planted(**kw, kind="product")),
                 Mistake("the weight A r w(r) detached and multiplied by logp: the right first derivative, "
                         "but not SAPO's value and not its second derivative",
                         "write the surrogate itself; a detached weight times logp is a different objective",
                         lambda **kw: _planted(**kw, kind="detached")))


def _gradient(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05, aggregation="per_response", *,
              chain=True, sign=-1.0, temperature="advantage", weights="aggregation"):
    """-A r w_tau(r) times each token's weight in the mean; the switches make the mistakes."""
    r = _ratio(logp, behavior_logp)
    a = advantages[:, None].expand_as(r)
    side = a > 0 if temperature == "advantage" else r > 1
    tau = torch.where(side, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
    per_token = sign * a * gate_weight(r, tau) * (r if chain else 1.0)
    if weights == "aggregation":
        weight = aggregation_weights(mask, aggregation, dtype=r.dtype)
    else:
        weight = mask / mask.numel()
    return per_token * weight


GRADIENT_MISTAKES = (
    Mistake("the chain rule's factor r left out (dr / d logp = r): this is the gradient in r, not in logp",
            "multiply by r: d f(r) / d logp = f'(r) * r", lambda **kw: _gradient(**kw, chain=False)),
    Mistake("the objective's gradient instead of the loss's (the sign is flipped)",
            "the loss is minus the surrogate, so its gradient is -A r w_tau(r) times the token's weight",
            lambda **kw: _gradient(**kw, sign=1.0)),
    Mistake("the temperature chosen by the ratio's side (r > 1) instead of the advantage's sign",
            "choose tau by the sign of A", lambda **kw: _gradient(**kw, temperature="ratio")),
    Mistake("each token weighted 1 / (B T), padding included in the count, instead of its weight in the mean",
            "per_response: 1 / (B' L_i) for the B' non-empty responses; token_pool: 1 / N for N real tokens",
            lambda **kw: _gradient(**kw, weights="uniform")),
)

EXERCISES = [
    Exercise(id="10.sapo_loss", function="sapo_loss", reference=sapo_loss_reference, cases=_cases,
             mistakes=LOSS_MISTAKES, grad_wrt=("logp", "behavior_logp")),
    Exercise(id="10.sapo_gradient", function="sapo_logp_gradient", reference=sapo_gradient_reference,
             cases=_cases, mistakes=GRADIENT_MISTAKES),
]
