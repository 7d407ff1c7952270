"""Chapter 8's coded exercises: the sequence ratio as a masked geometric mean, and the gradient of the
sequence-level SAPO loss in closed form, checked against autograd through the package's loss."""

from __future__ import annotations

import math

import torch

from ...objective.gates import gate_weight, token_temperatures, update_coefficient
from ...objective.losses import level_log_ratio, policy_loss
from ..checks import Exercise
from ..mistakes import GSPO_SEQUENCE_RATIO, Mistake


# ---- 08.sequence_ratio: sequence_ratio(logp, behavior_logp, mask) -> (B,) ----------------------------------------
def sequence_ratio_of_package(logp, behavior_logp, mask):
    """The reference: the package's sequence-level log ratio (each response's mean over its tokens), read at the
    response's first token, exponentiated."""
    valid = mask > 0
    token_z = torch.where(valid, logp - behavior_logp.detach(), torch.zeros_like(logp))
    mean_z = level_log_ratio(token_z, valid, "sequence")
    first = valid.to(torch.int64).argmax(-1, keepdim=True)
    return torch.exp(mean_z.gather(-1, first).squeeze(-1))


def _batch(gen, lengths, width, spread):
    """logp, behavior_logp and a 0/1 mask for responses of the given lengths, padded to ``width``; the padding
    holds arbitrary log-probabilities, as a real padded batch does."""
    b = len(lengths)
    behavior = -3.0 * torch.rand(b, width, generator=gen, dtype=torch.float64) - 0.1
    logp = behavior + spread * torch.randn(b, width, generator=gen, dtype=torch.float64)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).to(torch.float64)
    return logp, behavior, mask


def _ratio_cases() -> list[dict]:
    """Responses of different lengths with padding, a one-token response, log ratios up to about +-2, and a batch
    whose padding holds -inf (a masked token's log-probability), where multiplying by the mask gives nan."""
    gen = torch.Generator().manual_seed(808)
    names = ("logp", "behavior_logp", "mask")
    first = _batch(gen, [5, 2, 7, 1], 7, 0.6)
    second = _batch(gen, [3, 11, 6], 12, 1.0)
    logp, behavior, mask = _batch(gen, [2, 4, 1], 4, 0.8)
    logp = torch.where(mask > 0, logp, torch.full_like(logp, -math.inf))
    return [dict(zip(names, first, strict=True)), dict(zip(names, second, strict=True)),
            dict(zip(names, (logp, behavior, mask), strict=True))]


def _ratio_masked_by_product(logp, behavior_logp, mask):
    return torch.exp(((logp - behavior_logp) * mask).sum(-1) / mask.sum(-1))


SEQUENCE_RATIO = GSPO_SEQUENCE_RATIO + (
    Mistake("padding removed by multiplying by the mask: -inf * 0 is nan, so a padding position that holds -inf "
            "(or nan) turns the whole response's ratio into nan",
            "select the real tokens instead of multiplying: torch.where(mask > 0, z, 0) (its gradient at padding "
            "is 0 too)",
            _ratio_masked_by_product),
)


# ---- 08.sequence_grad: sequence_level_grad(logp, behavior_logp, advantages, mask, tau_pos, tau_neg) -> (B, T) -------
def sequence_level_grad_by_autograd(logp, behavior_logp, advantages, mask, tau_pos, tau_neg):
    """The reference: d loss / d logp of ``policy_loss(..., importance_sampling_level="sequence")`` by autograd."""
    leaf = logp.detach().to(torch.float64).requires_grad_(True)
    out = policy_loss(leaf, behavior_logp.detach(), advantages, mask, tau_pos=tau_pos, tau_neg=tau_neg,
                      importance_sampling_level="sequence", compute_stats=False)
    (grad,) = torch.autograd.grad(out.loss, leaf)
    return grad


def _sequence_grad(logp, behavior_logp, advantages, mask, tau_pos, tau_neg, *, per_length=True, level="sequence",
                   masked=True, rule="advantage", factor="coefficient"):
    lengths = mask.sum(-1, keepdim=True)
    z = (logp - behavior_logp) * mask
    a = advantages[:, None]
    ratio = torch.exp(z.sum(-1, keepdim=True) / lengths) if level == "sequence" else torch.exp(z)
    if rule == "advantage":
        tau = token_temperatures(a.expand_as(ratio), tau_pos, tau_neg)
    else:
        tau = torch.where(ratio > 1, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    c = update_coefficient(ratio, tau) if factor == "coefficient" else gate_weight(ratio, tau)
    if per_length == "pooled":  # token_pool's weight: one over all the batch's tokens
        share = torch.full_like(lengths, logp.shape[0] / mask.sum())
    else:
        share = 1.0 / lengths if per_length else torch.ones_like(lengths)
    grad = -a * c * share / logp.shape[0]
    return grad * mask if masked else grad.expand_as(logp).clone()


def _grad_cases() -> list[dict]:
    """Both signs of A, A = 0, padded responses of different lengths (one of length 1), temperatures far apart,
    and sequence ratios on both sides of 1."""
    gen = torch.Generator().manual_seed(818)
    first = _batch(gen, [4, 6, 1, 3], 6, 0.5)
    second = _batch(gen, [2, 5, 5], 5, 0.9)
    names = ("logp", "behavior_logp", "mask")
    return [dict(zip(names, first, strict=True), advantages=torch.tensor([1.1, -0.9, 0.7, 0.0], dtype=torch.float64),
                 tau_pos=0.8, tau_neg=2.4),
            dict(zip(names, second, strict=True), advantages=torch.tensor([-1.4, 1.4, -0.3], dtype=torch.float64),
                 tau_pos=1.0, tau_neg=1.05)]


SEQUENCE_GRAD = (
    Mistake("the 1/T_i of the mean log ratio left out (d mu_i / d log p_t is 1/T_i, not 1)",
            "mu_i = (1/T_i) sum_t z_t, so each token gets -A_i c(s_i) / (B T_i)",
            lambda **kw: _sequence_grad(**kw, per_length=False)),
    Mistake("all tokens of the batch pooled (divided by sum_j T_j) instead of a mean per response",
            "the per-response average gives each response weight 1/B and each of its tokens 1/T_i: "
            "-A_i c(s_i) / (B T_i)",
            lambda **kw: _sequence_grad(**kw, per_length="pooled")),
    Mistake("each token's own ratio r_t used (the token-level gradient) instead of the sequence ratio s_i",
            "every token of response i sees the same s_i = exp(mu_i): use c(s_i), not c(r_t)",
            lambda **kw: _sequence_grad(**kw, level="token")),
    Mistake("padding tokens given a gradient (the mask left out)",
            "multiply by the mask: padding is not part of the response, its gradient is 0",
            lambda **kw: _sequence_grad(**kw, masked=False)),
    Mistake("the gate w(s_i) used instead of the coefficient c(s_i) = s_i w(s_i) (the factor s_i of ds/dmu dropped)",
            "d s_i / d mu_i = s_i, so the chain rule gives w(s_i) * s_i = c(s_i)",
            lambda **kw: _sequence_grad(**kw, factor="gate")),
    Mistake("the temperature chosen by the ratio's side (s > 1) instead of the advantage's sign",
            "choose tau by the sign of A_i: tau_pos where A_i > 0, tau_neg otherwise",
            lambda **kw: _sequence_grad(**kw, rule="ratio")),
)


EXERCISES = [
    Exercise(id="08.sequence_ratio", function="sequence_ratio", reference=sequence_ratio_of_package,
             cases=_ratio_cases, mistakes=SEQUENCE_RATIO, grad_wrt=("logp",)),
    Exercise(id="08.sequence_grad", function="sequence_level_grad", reference=sequence_level_grad_by_autograd,
             cases=_grad_cases, mistakes=SEQUENCE_GRAD),
]
