"""Chapter 4's coded exercises: the ratio from stored log-probabilities, and PPO's clipped surrogate."""

from __future__ import annotations

import math

import torch

from ...objective.clip import ppo_clip_surrogate
from ..checks import Exercise
from ..mistakes import CLIPPED_SURROGATE_LOSS, Mistake


def _catalogued(words: str, compute) -> Mistake:
    """The catalogue's wording (name and fix) for the mistake whose name contains ``words``, computed per token."""
    (found,) = [m for m in CLIPPED_SURROGATE_LOSS if words in m.name]
    return Mistake(found.name, found.fix, compute)


# ---- 04.ratio: logp (B, T), behavior_logp (B, T) -> (B, T) -------------------------------------------------------
def token_ratio(logp, behavior_logp):
    """r = exp(log p - log b), with the stored denominator a constant: the gradient reaches logp only."""
    return torch.exp(logp - behavior_logp.detach())


def _ratio_cases() -> list[dict]:
    """Log ratios of order 0.1 (a fresh batch), exactly 0 (r = 1), and +-5 (r = e^5 or e^-5, where only a
    relative tolerance is fair), with log-probabilities down to about -9, and down to -800 (a probability that
    underflows: only the log-space ratio survives)."""
    gen = torch.Generator().manual_seed(2041)
    behavior = torch.log(torch.rand(3, 4, generator=gen, dtype=torch.float64) * 0.9 + 0.05)
    near = behavior + 0.1 * torch.randn(3, 4, generator=gen, dtype=torch.float64)
    far_behavior = torch.tensor([[-0.5, -6.0, -2.0], [-9.0, -1.0, -3.0]], dtype=torch.float64)
    far = far_behavior + torch.tensor([[0.0, 5.0, -5.0], [5.0, -0.3, 0.0]], dtype=torch.float64)
    # log-probabilities of a long response's rare tokens: exp(logp) underflows to 0 in float64, the ratio does not
    tiny_behavior = torch.tensor([[-800.0, -760.0], [-745.5, -1.0]], dtype=torch.float64)
    tiny = tiny_behavior + torch.tensor([[0.5, -0.2], [0.0, 0.1]], dtype=torch.float64)
    return [dict(logp=near, behavior_logp=behavior), dict(logp=far, behavior_logp=far_behavior),
            dict(logp=tiny, behavior_logp=tiny_behavior)]


RATIO_MISTAKES = (
    _catalogued("behavior_logp not detached", lambda logp, behavior_logp: torch.exp(logp - behavior_logp)),
    Mistake("the detach on the wrong tensor: logp detached, behavior_logp not",
            "the policy being trained is logp: detach behavior_logp instead, exp(logp - behavior_logp.detach())",
            lambda logp, behavior_logp: torch.exp(logp.detach() - behavior_logp)),
    Mistake("the ratio inverted: b / p instead of p / b",
            "the current policy is on top: r = exp(logp - behavior_logp)",
            lambda logp, behavior_logp: torch.exp(behavior_logp.detach() - logp)),
    Mistake("the log ratio logp - behavior_logp returned, never exponentiated",
            "the ratio is exp of the log ratio: torch.exp(logp - behavior_logp.detach())",
            lambda logp, behavior_logp: logp - behavior_logp.detach()),
    Mistake("the log-probabilities divided (logp / behavior_logp) instead of the probabilities",
            "a ratio of probabilities is a difference of log-probabilities: exp(logp - behavior_logp)",
            lambda logp, behavior_logp: logp / behavior_logp.detach()),
    Mistake("the probabilities divided, exp(logp) / exp(behavior_logp): both underflow to 0 for very unlikely "
            "tokens and the ratio becomes 0/0",
            "subtract in log space first, exp(logp - behavior_logp.detach()), which stays finite",
            lambda logp, behavior_logp: torch.exp(logp) / torch.exp(behavior_logp.detach())),
)


# ---- 04.clipped_surrogate: ratio (N,), adv (N,), eps_low, eps_high -> (N,) ---------------------------------------
def _clipped_cases() -> list[dict]:
    """Ratios below, inside and above the band for both signs of A, A = 0, r = 1 exactly, e^5 and e^-5, and
    an asymmetric band (eps_low != eps_high); no ratio sits exactly on a kink."""
    ratios = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5, math.exp(5.0), math.exp(-5.0)], dtype=torch.float64)
    signs = torch.tensor([1.0, -1.0], dtype=torch.float64)
    r = ratios.repeat(2)
    adv = signs.repeat_interleave(len(ratios)) * torch.tensor([1.5, 0.7], dtype=torch.float64).repeat_interleave(
        len(ratios))
    zero = dict(ratio=torch.tensor([0.5, 1.0, 3.0], dtype=torch.float64), adv=torch.zeros(3, dtype=torch.float64),
                eps_low=0.2, eps_high=0.2)
    return [dict(ratio=r, adv=adv, eps_low=0.2, eps_high=0.2),
            dict(ratio=r * 0.96, adv=-adv, eps_low=0.1, eps_high=0.3), zero]


def _both_sides_min(ratio, adv, eps_low, eps_high):
    return adv * torch.minimum(ratio, torch.full_like(ratio, 1 + eps_high))


CLIPPED_SURROGATE_MISTAKES = (
    _catalogued("r * A clipped", lambda ratio, adv, eps_low, eps_high: torch.minimum(
        ratio * adv, torch.clamp(ratio * adv, 1 - eps_low, 1 + eps_high))),
    Mistake("max instead of min: the pessimistic bound turned into an optimistic one",
            "take torch.minimum(r * A, clip(r) * A)",
            lambda ratio, adv, eps_low, eps_high: torch.maximum(
                ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)),
    Mistake("the clipped term alone, clip(r) * A, without the min: flat on both sides of the band",
            "take the min with the unclipped r * A, so a token that moved against its advantage keeps its gradient",
            lambda ratio, adv, eps_low, eps_high: torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv),
    Mistake("the A > 0 form, A * min(r, 1 + eps_high), used for a negative advantage too",
            "multiplying by a negative A reverses the order: for A < 0 the surrogate is A * max(r, 1 - eps_low); "
            "min(r * A, clip(r) * A) covers both signs",
            _both_sides_min),
    Mistake("eps_low and eps_high swapped",
            "the band is [1 - eps_low, 1 + eps_high]",
            lambda ratio, adv, eps_low, eps_high: ppo_clip_surrogate(ratio, adv, eps_high, eps_low)),
)


EXERCISES = [
    Exercise(id="04.ratio", function="token_ratio", reference=token_ratio, cases=_ratio_cases,
             mistakes=RATIO_MISTAKES, grad_wrt=("logp", "behavior_logp")),
    Exercise(id="04.clipped_surrogate", function="clipped_surrogate", reference=ppo_clip_surrogate,
             cases=_clipped_cases, mistakes=CLIPPED_SURROGATE_MISTAKES, grad_wrt=("ratio",)),
]
