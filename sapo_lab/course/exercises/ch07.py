"""Chapter 7's coded exercises: the temperature chosen by the advantage's sign, and the logit ascent direction
A c_tau(r) (e_a - p) checked against the package's loss."""

from __future__ import annotations

import math

import torch

from ...objective.gates import gate_weight, token_temperatures, update_coefficient
from ...objective.losses import policy_loss
from ..checks import Exercise
from ..mistakes import Mistake


def _temperature(advantage, ratio, tau_pos, tau_neg, *, rule="advantage"):
    """The per-token temperature under the right rule or a mistaken one."""
    if rule == "advantage":
        return token_temperatures(advantage, tau_pos, tau_neg)
    if rule == "swapped":
        return token_temperatures(advantage, tau_neg, tau_pos)
    if rule == "ratio":
        return torch.where(ratio > 1, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    return torch.full_like(ratio, tau_pos)


# ---- 07.token_scale: token_scale(ratio, advantage, tau_pos, tau_neg) -> A c_tau(r), per token ---------------------
def signed_coefficient(ratio, advantage, tau_pos, tau_neg, *, rule="advantage", gate_only=False):
    """A * c_tau(r) with tau by the sign of A (the reference), or one of the mistakes the switches name."""
    tau = _temperature(advantage, ratio, tau_pos, tau_neg, rule=rule)
    factor = gate_weight(ratio, tau) if gate_only else update_coefficient(ratio, tau)
    return advantage * factor


def _token_scale_cases() -> list[dict]:
    """Both signs of A on both sides of r = 1 (so the ratio's side and the advantage's sign disagree on some
    tokens), A = 0, a large ratio e^3, and two temperatures far apart so that the one chosen shows."""
    gen = torch.Generator().manual_seed(707)
    ratio = torch.tensor([0.4, 0.4, 1.0, 1.0, 1.6, 1.6, math.exp(3.0), 0.8, 1.25], dtype=torch.float64)
    advantage = torch.tensor([1.3, -0.7, 0.9, -1.1, 0.5, -2.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    batch_ratio = torch.exp(0.5 * torch.randn(4, 6, generator=gen, dtype=torch.float64))
    batch_adv = torch.randn(4, 1, generator=gen, dtype=torch.float64).expand(4, 6).clone()
    return [dict(ratio=ratio, advantage=advantage, tau_pos=0.6, tau_neg=2.5),
            dict(ratio=batch_ratio, advantage=batch_adv, tau_pos=1.0, tau_neg=1.8)]


TOKEN_SCALE = (
    Mistake("the temperature chosen by the ratio's side (r > 1) instead of the advantage's sign",
            "choose tau by the sign of A: torch.where(advantage > 0, tau_pos, tau_neg)",
            lambda **kw: signed_coefficient(**kw, rule="ratio")),
    Mistake("tau_pos and tau_neg swapped",
            "use tau_pos where the advantage is positive and tau_neg where it is negative",
            lambda **kw: signed_coefficient(**kw, rule="swapped")),
    Mistake("one temperature (tau_pos) for every token",
            "tokens with a negative advantage take tau_neg",
            lambda **kw: signed_coefficient(**kw, rule="single")),
    Mistake("the gate w_tau(r) used instead of the coefficient c_tau(r) = r w_tau(r)",
            "multiply the gate by r: the score of the ratio is r times the score of log p",
            lambda **kw: signed_coefficient(**kw, gate_only=True)),
)


# ---- 07.logit_ascent: logit_ascent(logits, sampled, ratio, advantage, tau_pos, tau_neg) -> (N, K) ------------------
def logit_ascent_by_autograd(logits, sampled, ratio, advantage, tau_pos, tau_neg):
    """The reference: minus the gradient of ``sapo_lab.policy_loss`` on the logits, one token (a response of
    length 1) at a time, with the behavior log-probability set so that p / b is the given ratio."""
    rows = []
    for n in range(logits.shape[0]):
        leaf = logits[n].detach().to(torch.float64).requires_grad_(True)
        logp = torch.log_softmax(leaf, -1)[int(sampled[n])].reshape(1, 1)
        behavior = logp.detach() - torch.log(ratio[n].detach().to(torch.float64))
        out = policy_loss(logp, behavior, advantage[n].detach().to(torch.float64).reshape(1),
                          torch.ones(1, 1, dtype=torch.float64), tau_pos=tau_pos, tau_neg=tau_neg,
                          compute_stats=False)
        (grad,) = torch.autograd.grad(out.loss, leaf)
        rows.append(-grad)
    return torch.stack(rows)


def _ascent(logits, sampled, ratio, advantage, tau_pos, tau_neg, *, p_from="softmax", rule="advantage",
            coefficient=True, sign=1.0):
    probabilities = {"softmax": torch.softmax(logits, -1), "log_softmax": torch.log_softmax(logits, -1),
                     "logits": logits}
    p = probabilities[p_from]
    e_a = torch.nn.functional.one_hot(sampled, logits.shape[-1]).to(logits.dtype)
    tau = _temperature(advantage, ratio, tau_pos, tau_neg, rule=rule)
    scale = advantage * (update_coefficient(ratio, tau) if coefficient else 1.0)
    return sign * scale[:, None] * (e_a - p)


def _logit_cases() -> list[dict]:
    """Both signs of A, ratios on both sides of 1, A = 0 (a zero row), K = 2, and a peaked K = 40 softmax."""
    gen = torch.Generator().manual_seed(717)

    def case(n, k, scale, ratio, advantage, tau_pos, tau_neg):
        logits = scale * torch.randn(n, k, generator=gen, dtype=torch.float64)
        sampled = torch.randint(k, (n,), generator=gen)
        return dict(logits=logits, sampled=sampled, ratio=torch.tensor(ratio, dtype=torch.float64),
                    advantage=torch.tensor(advantage, dtype=torch.float64), tau_pos=tau_pos, tau_neg=tau_neg)

    return [case(6, 5, 1.0, [0.5, 0.5, 1.0, 1.7, 1.7, 0.9], [1.2, -0.8, -1.0, 0.6, -1.5, 0.0], 0.7, 2.2),
            case(3, 2, 2.0, [1.3, 0.7, 2.5], [-1.0, 1.0, 0.4], 1.0, 1.05),
            case(4, 40, 4.0, [1.1, 0.6, 3.0, 1.0], [0.3, -0.3, -2.0, 1.0], 1.5, 3.0)]


LOGIT_ASCENT = (
    Mistake("the loss's gradient returned instead of the ascent direction (the sign is flipped)",
            "the ascent direction of the objective is A c_tau(r) (e_a - p), minus the gradient of the loss",
            lambda **kw: _ascent(**kw, sign=-1.0)),
    Mistake("the plain policy gradient A (e_a - p), without SAPO's coefficient c_tau(r)",
            "multiply by c_tau(r) = r w_tau(r), with tau chosen by the sign of A",
            lambda **kw: _ascent(**kw, coefficient=False)),
    Mistake("p taken as the logits themselves instead of softmax(logits)",
            "p is the softmax of the logits: torch.softmax(logits, -1)",
            lambda **kw: _ascent(**kw, p_from="logits")),
    Mistake("the log-probabilities log_softmax(logits) used in place of p",
            "the score of log p_a on the logits is e_a - p with p = softmax(logits), the probabilities",
            lambda **kw: _ascent(**kw, p_from="log_softmax")),
    Mistake("the temperature chosen by the ratio's side (r > 1) instead of the advantage's sign",
            "choose tau by the sign of A: tau_pos where A > 0, tau_neg otherwise",
            lambda **kw: _ascent(**kw, rule="ratio")),
    Mistake("tau_pos and tau_neg swapped",
            "use tau_pos where the advantage is positive and tau_neg where it is negative",
            lambda **kw: _ascent(**kw, rule="swapped")),
)


EXERCISES = [
    Exercise(id="07.token_scale", function="token_scale", reference=signed_coefficient, cases=_token_scale_cases,
             mistakes=TOKEN_SCALE),
    Exercise(id="07.logit_ascent", function="logit_ascent", reference=logit_ascent_by_autograd, cases=_logit_cases,
             mistakes=LOGIT_ASCENT, rtol=1e-6, atol=1e-9),
]
