"""The mistakes students make, each computed from the same inputs as the right answer.

One catalogue serves the book's exercise checks (:mod:`sapo_lab.course.checks`) and the graded assignment's
grader: when a student's output is wrong, the output of every known mistake is computed on the same inputs, and
the one it matches is named with its fix. A :class:`Mistake` is a name (what the student did), a fix (what to
change) and ``compute``, a plain re-implementation of the mistake that takes exactly the keyword arguments the
right answer takes.

Topics are the names of the functions students write. The assignment's parts (``group_advantages``,
``masked_mean``, ``clipped_surrogate_loss``, ``sapo_gate``, ``sapo_loss``, ``gspo_sequence_ratio``,
``update_loss``) take the arguments of the handout's skeleton; the book's exercises reuse those names where they
write the same function and add their own topics otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Mistake:
    """A known wrong answer: ``name`` says what was done, ``fix`` what to change, ``compute(**inputs)`` its output."""

    name: str
    fix: str
    compute: Callable[..., object]


# ---- group advantages: rewards (P, G) -> (P, G) ----------------------------------------------------------------
def _adv(rewards, eps, *, dim=-1, unbiased=False, eps_inside=False, centre=True):
    r = torch.as_tensor(rewards, dtype=torch.float64)
    centred = r - r.mean(dim=dim, keepdim=True) if centre else r
    var = r.var(dim=dim, keepdim=True, unbiased=unbiased)
    return centred / (torch.sqrt(var + eps) if eps_inside else var.sqrt() + eps)


GROUP_ADVANTAGES = (
    Mistake("divided by the sample standard deviation (G - 1 in the variance)",
            "use the population standard deviation: std(unbiased=False), the mean of squares over G",
            lambda rewards, eps=1e-6: _adv(rewards, eps, unbiased=True)),
    Mistake("epsilon added inside the square root (sqrt(var + eps)) instead of to the standard deviation",
            "add eps to the standard deviation: (r - mean) / (std + eps)",
            lambda rewards, eps=1e-6: _adv(rewards, eps, eps_inside=True)),
    Mistake("statistics taken over the wrong axis (across prompts instead of within each group)",
            "take the mean and std over each group's G responses: dim=-1 (or dim=1) with keepdim=True",
            lambda rewards, eps=1e-6: _adv(rewards, eps, dim=0)),
    Mistake("the group mean not subtracted",
            "centre the rewards first: rewards - rewards.mean(dim=-1, keepdim=True)",
            lambda rewards, eps=1e-6: _adv(rewards, eps, centre=False)),
    Mistake("the rewards centred but not divided by the standard deviation",
            "divide the centred rewards by (std + eps)",
            lambda rewards, eps=1e-6: torch.as_tensor(rewards, dtype=torch.float64)
            - torch.as_tensor(rewards, dtype=torch.float64).mean(dim=-1, keepdim=True)),
)


# ---- masked means: values (B, T), mask (B, T) -> scalar --------------------------------------------------------
def _per_response(values, mask):
    return ((values * mask).sum(-1) / mask.sum(-1)).mean()


def _token_pool(values, mask):
    return (values * mask).sum() / mask.sum()


def _by_aggregation(per_response, token_pool):
    """A mistake of ``masked_mean(values, mask, aggregation)``: ``per_response``/``token_pool`` give its output."""
    def compute(values, mask, aggregation="per_response"):
        return per_response(values, mask) if aggregation == "per_response" else token_pool(values, mask)
    return compute


MASKED_MEAN = (
    Mistake("the mask left out: a plain mean averages the padding in",
            "multiply by the mask and divide by the number of real tokens, mask.sum(...)",
            _by_aggregation(lambda v, m: v.mean(), lambda v, m: v.mean())),
    Mistake("padding counted in the denominator (divided by T, not by the response's length)",
            "divide each response's masked sum by mask.sum(-1), its own number of tokens",
            _by_aggregation(lambda v, m: ((v * m).sum(-1) / v.shape[-1]).mean(),
                            lambda v, m: (v * m).sum() / v.numel())),
    Mistake("the two aggregations swapped",
            "per_response: mean over each response's tokens, then over responses; token_pool: one mean over "
            "all tokens",
            _by_aggregation(_token_pool, _per_response)),
)


# ---- ratios and PPO's clip ---------------------------------------------------------------------------------------
def _ratio(logp, behavior_logp, detach=True):
    return torch.exp(logp - (behavior_logp.detach() if detach else behavior_logp))


def _aggregate(values, mask, aggregation="per_response", *, swap=False, masked=True, padded_count=False):
    """The loss's mean: ``aggregation`` as asked, or the other one when ``swap``; padding averaged in unless
    ``masked``; ``padded_count``: padding zeroed but counted in the denominator (a mean over T or B * T)."""
    pooled = (aggregation == "token_pool") != swap
    if padded_count:
        zeroed = values * mask
        return zeroed.mean() if pooled else zeroed.mean(-1).mean()
    m = mask if masked else torch.ones_like(mask)
    return _token_pool(values, m) if pooled else _per_response(values, m)


PADDED_COUNT = ("padding zeroed but counted in the mean's denominator (divided by T or B * T, not by the number "
                "of real tokens)", "divide by the real token count: mask.sum(-1) per response, mask.sum() pooled")


def _aggregation_mistakes(loss) -> tuple[Mistake, ...]:
    """The mean's mistakes, alike for every per-token loss that takes ``swap``, ``masked`` and ``padded_count``."""
    return (
        Mistake("the two aggregations swapped (per_response pooled, token_pool averaged per response)",
                "per_response: each response's mean over its own tokens, then the mean over responses; token_pool: "
                "one mean over every token of the batch",
                lambda **kw: loss(**kw, swap=True)),
        Mistake("the mask left out: padding tokens enter the mean",
                "weight the per-token loss by the mask and divide by each response's own length",
                lambda **kw: loss(**kw, masked=False)),
        Mistake(*PADDED_COUNT, lambda **kw: loss(**kw, padded_count=True)),
    )


def _clip_loss(logp, behavior_logp, advantages, mask, eps=0.2, aggregation="per_response", *, pick=torch.minimum,
               clip="ratio", detach=True, swap=False, sign=-1.0, masked=True, padded_count=False):
    r = _ratio(logp, behavior_logp, detach)
    a = advantages[:, None]
    if clip == "ratio":
        clipped = torch.clamp(r, 1 - eps, 1 + eps) * a
    elif clip == "product":
        clipped = torch.clamp(r * a, 1 - eps, 1 + eps)
    else:
        clipped = r * a
    per_token = sign * pick(r * a, clipped)
    return _aggregate(per_token, mask, aggregation, swap=swap, masked=masked, padded_count=padded_count)


CLIPPED_SURROGATE_LOSS = (
    Mistake("max instead of min: the pessimistic bound turned into an optimistic one",
            "take torch.minimum(r * A, clip(r) * A), then negate for the loss",
            lambda **kw: _clip_loss(**kw, pick=torch.maximum)),
    Mistake("no clipping: the plain r * A surrogate",
            "clip the ratio to [1 - eps, 1 + eps] and take the minimum with the unclipped term",
            lambda **kw: _clip_loss(**kw, clip="none")),
    Mistake("the product r * A clipped instead of the ratio r",
            "clip r alone, torch.clamp(r, 1 - eps, 1 + eps), then multiply by A",
            lambda **kw: _clip_loss(**kw, clip="product")),
    Mistake("the objective returned instead of the loss (the sign is flipped)",
            "the loss is minus the surrogate: return -mean(min(...))",
            lambda **kw: _clip_loss(**kw, sign=1.0)),
    *_aggregation_mistakes(_clip_loss),
    Mistake("behavior_logp not detached: a gradient flows into the old policy's log-probabilities",
            "detach behavior_logp (or compute the ratio from behavior_logp.detach())",
            lambda **kw: _clip_loss(**kw, detach=False)),
)


# ---- SAPO's gate f_tau(r) = (4 / tau) sigmoid(tau (r - 1)) --------------------------------------------------------
def _gate(ratio, tau, *, scale=4.0, divide=True, shift=1.0):
    r = torch.as_tensor(ratio, dtype=torch.float64) if not torch.is_tensor(ratio) else ratio
    tau_t = torch.as_tensor(tau, dtype=r.dtype)
    factor = scale / tau_t if divide else scale * tau_t
    return factor * torch.sigmoid(tau_t * (r - shift))


SAPO_GATE = (
    Mistake("the 4 / tau prefactor left out (a bare sigmoid)",
            "multiply by 4 / tau: it makes the gate's slope 1 at r = 1, like the plain ratio's",
            lambda ratio, tau: torch.sigmoid(torch.as_tensor(tau) * (torch.as_tensor(ratio) - 1))),
    Mistake("2 / tau instead of 4 / tau",
            "the sigmoid's slope at 0 is 1/4, so the prefactor is 4 / tau",
            lambda ratio, tau: _gate(ratio, tau, scale=2.0)),
    Mistake("tau multiplied instead of divided in the prefactor (4 * tau)",
            "the prefactor is 4 / tau",
            lambda ratio, tau: _gate(ratio, tau, divide=False)),
    Mistake("the sigmoid not centred at r = 1 (sigmoid(tau * r))",
            "the argument is tau * (r - 1)",
            lambda ratio, tau: _gate(ratio, tau, shift=0.0)),
)


# ---- SAPO's loss ----------------------------------------------------------------------------------------------
def _sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05, aggregation="per_response", *,
               temperature="advantage", prefactor=True, sign=-1.0, detach=True, swap=False, masked=True,
               centred=False, padded_count=False):
    r = _ratio(logp, behavior_logp, detach)
    a = advantages[:, None].expand_as(r)
    side = {"advantage": a > 0, "swapped": a <= 0, "ratio": r > 1, "single": torch.ones_like(a, dtype=torch.bool)}
    tau = torch.where(side[temperature], torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
    gate = torch.sigmoid(tau * (r - 1)) - (0.5 if centred else 0.0)  # centred: 0 on-policy, same gradient
    per_token = sign * a * (4 / tau * gate if prefactor else gate)
    return _aggregate(per_token, mask, aggregation, swap=swap, masked=masked, padded_count=padded_count)


SAPO_LOSS = (
    Mistake("tau_pos and tau_neg swapped",
            "use tau_pos where the advantage is positive and tau_neg where it is negative",
            lambda **kw: _sapo_loss(**kw, temperature="swapped")),
    Mistake("the temperature chosen by the ratio's side (r > 1) instead of the advantage's sign",
            "choose tau by the sign of A (tau_pos where A > 0), not by the ratio's side",
            lambda **kw: _sapo_loss(**kw, temperature="ratio")),
    Mistake("one temperature (tau_pos) for every token",
            "tokens with a negative advantage take tau_neg",
            lambda **kw: _sapo_loss(**kw, temperature="single")),
    Mistake("the 4 / tau prefactor left out",
            "the surrogate is (4 / tau) * sigmoid(tau * (r - 1))",
            lambda **kw: _sapo_loss(**kw, prefactor=False)),
    Mistake("the objective returned instead of the loss (the sign is flipped)",
            "the loss is minus A times the gate: -A * f_tau(r)",
            lambda **kw: _sapo_loss(**kw, sign=1.0)),
    *_aggregation_mistakes(_sapo_loss),
    Mistake("behavior_logp not detached: a gradient flows into the old policy's log-probabilities",
            "detach behavior_logp; only logp (the policy being trained) carries a gradient",
            lambda **kw: _sapo_loss(**kw, detach=False)),
)


# ---- GSPO's sequence ratio: the masked geometric mean of the token ratios -----------------------------------------
def _seq_ratio(logp, behavior_logp, mask, *, padded=False, total=False, arithmetic=False):
    z = logp - behavior_logp.detach()
    m = torch.ones_like(mask) if padded else mask
    if arithmetic:
        return (torch.exp(z) * m).sum(-1) / m.sum(-1)
    s = (z * m).sum(-1)
    return torch.exp(s if total else s / m.sum(-1))


GSPO_SEQUENCE_RATIO = (
    Mistake("padding tokens counted in the mean log-ratio",
            "sum the log-ratios over real tokens only and divide by the response's own length",
            lambda **kw: _seq_ratio(**kw, padded=True)),
    Mistake("the total log-ratio exponentiated (a product of ratios, not a geometric mean)",
            "divide the masked sum of log-ratios by the response's length before exp",
            lambda **kw: _seq_ratio(**kw, total=True)),
    Mistake("the arithmetic mean of the token ratios instead of their geometric mean",
            "average the log-ratios, then exponentiate: exp(mean(log r))",
            lambda **kw: _seq_ratio(**kw, arithmetic=True)),
)


MISTAKES: dict[str, tuple[Mistake, ...]] = {
    "group_advantages": GROUP_ADVANTAGES,
    "masked_mean": MASKED_MEAN,
    "clipped_surrogate_loss": CLIPPED_SURROGATE_LOSS,
    "sapo_gate": SAPO_GATE,
    "sapo_loss": SAPO_LOSS,
    "gspo_sequence_ratio": GSPO_SEQUENCE_RATIO,
}


# ---- describing a difference no known mistake explains ----------------------------------------------------------
def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _distinct(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` with enough significant digits (6 to 16) that their printed forms differ."""
    for digits in (6, 9, 12, 16):
        pair = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if pair[0] != pair[1]:
            return pair
    return pair


def describe_difference(got: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-6, atol: float = 1e-9) -> str:
    """One clause saying how ``got`` differs from ``expected`` (same shape): the sign, a constant factor or shift,
    or which elements differ, with the largest difference's position and values."""
    g, e = got.detach().to(torch.float64).reshape(-1), expected.detach().to(torch.float64).reshape(-1)
    if g.numel() == 0:
        return "both are empty"
    bad = ~torch.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)  # a nan where the reference has one agrees
    if not bool(bad.any()):
        return "no element differs"
    shape = tuple(expected.shape)
    where = int(torch.argmax(torch.where(bad, (g - e).abs().nan_to_num(float("inf")), torch.zeros_like(g))))
    index = list(torch.unravel_index(torch.tensor(where), shape)) if shape else []
    at = f"[{', '.join(str(int(i)) for i in index)}]" if index else ""
    got_text, want_text = _distinct(float(g[where]), float(e[where]))
    largest = f"largest difference at {at or 'the value'}: got {got_text}, expected {want_text}"
    if e.numel() == 1:  # one number: a factor or a shift always "fits", so it would explain nothing
        return largest
    if bool(torch.isclose(g, -e, rtol=rtol, atol=atol).all()):
        return f"the sign is flipped everywhere ({largest})"
    nonzero = e.abs() > atol
    if bool(nonzero.any()):
        factors = g[nonzero] / e[nonzero]
        k = float(factors.median())
        if _fmt(k) != "1" and bool(torch.isclose(g, k * e, rtol=rtol, atol=atol).all()):
            return f"every element is {_fmt(k)} times the right one ({largest})"
    shift = float((g - e).median())
    if abs(shift) > atol and bool(torch.isclose(g, e + shift, rtol=rtol, atol=atol).all()):
        return f"every element is shifted by {_fmt(shift)} ({largest})"
    return f"{int(bad.sum())} of {e.numel()} elements differ; {largest}"


# ---- the graded assignment's further mistakes (topics as the grader's parts; the exercises' tuples unchanged) ----
def _whole_batch_advantages(rewards, eps=1e-6):
    r = torch.as_tensor(rewards, dtype=torch.float64)
    return (r - r.mean()) / (r.std(unbiased=False) + eps)


def _wrong_tensor_detached(loss):
    """``loss`` with logp detached and behavior_logp not: the value is right, every gradient goes the wrong way."""
    def compute(logp, behavior_logp, **kw):
        return loss(logp=logp.detach(), behavior_logp=behavior_logp, **kw, detach=False)
    return compute


def _gspo_ratio(logp, behavior_logp, mask):
    """GSPO's sequence ratio with no detach at all (the grader's behavior_logp mistakes take what they detach)."""
    return torch.exp(((logp - behavior_logp) * mask).sum(-1) / mask.sum(-1))


WRONG_TENSOR_DETACHED = ("the detach on the wrong tensor: logp detached, behavior_logp not",
                         "detach behavior_logp (the old policy) and leave logp, the policy being trained, attached")
GSPO_NOT_DETACHED = Mistake(
    "behavior_logp not detached: a gradient flows into the old policy's log-probabilities",
    "detach behavior_logp in the log-ratio: logp - behavior_logp.detach()",
    lambda logp, behavior_logp, mask: _gspo_ratio(logp, behavior_logp, mask))
GSPO_WRONG_TENSOR = Mistake(
    *WRONG_TENSOR_DETACHED, lambda logp, behavior_logp, mask: _gspo_ratio(logp.detach(), behavior_logp, mask))


def _update(logp, behavior_logp, rewards, mask, tau_pos=1.0, tau_neg=1.05, *, advantages=None, **loss):
    """Part 7's loss from a (P, G) reward table: ``advantages`` (a function of the table) in place of the
    per-group normalisation, the rest as ``_sapo_loss`` with ``loss``'s switches."""
    table = torch.as_tensor(rewards, dtype=torch.float64)
    adv = (advantages or (lambda r: _adv(r, 1e-6)))(table).reshape(-1)
    return _sapo_loss(logp, behavior_logp, adv, mask, tau_pos, tau_neg, **loss)


UPDATE_LOSS = (
    Mistake("advantages normalised over the whole batch instead of within each group",
            "normalise each prompt's G rewards by their own mean and std: group_advantages(rewards)",
            lambda **kw: _update(**kw, advantages=_whole_batch_advantages)),
    Mistake("advantages divided by the sample standard deviation (G - 1 in the variance)",
            "use the population standard deviation, as group_advantages does",
            lambda **kw: _update(**kw, advantages=lambda r: _adv(r, 1e-6, unbiased=True))),
    Mistake("the advantages flattened column by column (response j of every prompt together)",
            "flatten row by row, advantages.reshape(-1): row i of logp is response i % G of prompt i // G",
            lambda **kw: _update(**kw, advantages=lambda r: _adv(r, 1e-6).T)),
    Mistake("the raw rewards used as advantages (no group normalisation)",
            "normalise the rewards within each group first: group_advantages(rewards)",
            lambda **kw: _update(**kw, advantages=lambda r: r)),
    Mistake("tau_pos and tau_neg swapped",
            "use tau_pos where the advantage is positive and tau_neg where it is negative",
            lambda **kw: _update(**kw, temperature="swapped")),
    Mistake("all tokens pooled into one mean instead of a mean per response",
            "average over each response's tokens first, then over responses",
            lambda **kw: _update(**kw, swap=True)),
    Mistake("the objective returned instead of the loss (the sign is flipped)",
            "the loss is minus A times the gate: -A * f_tau(r)",
            lambda **kw: _update(**kw, sign=1.0)),
    Mistake("behavior_logp not detached: a gradient flows into the old policy's log-probabilities",
            "detach behavior_logp; only logp (the policy being trained) carries a gradient",
            lambda **kw: _update(**kw, detach=False)),
    Mistake(*WRONG_TENSOR_DETACHED, _wrong_tensor_detached(_update)),
)

MISTAKES["group_advantages"] = GROUP_ADVANTAGES + (
    Mistake("statistics taken over the whole batch instead of within each group",
            "take the mean and std over each group's G responses: dim=-1 with keepdim=True",
            _whole_batch_advantages),)
MISTAKES["clipped_surrogate_loss"] = CLIPPED_SURROGATE_LOSS + (
    Mistake(*WRONG_TENSOR_DETACHED, _wrong_tensor_detached(_clip_loss)),)
MISTAKES["sapo_loss"] = SAPO_LOSS + (Mistake(*WRONG_TENSOR_DETACHED, _wrong_tensor_detached(_sapo_loss)),)
MISTAKES["gspo_sequence_ratio"] = GSPO_SEQUENCE_RATIO + (GSPO_NOT_DETACHED, GSPO_WRONG_TENSOR)
MISTAKES["update_loss"] = UPDATE_LOSS
