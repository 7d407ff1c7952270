"""The assignment's reference answers, computed by sapo_lab, and the grader's fresh inputs.

The grader compares a student's functions with these in the grading (parent) process, never in the process that
runs the student's code; each is the definition the handout states. The mistakes it names are computed from the
same inputs by ``mistakes.py``'s catalogue, which the book's exercise checks share. :func:`fresh_cases` draws the
inputs a grading run adds to the frozen ones.
"""

from __future__ import annotations

import torch

from sapo_lab.objective.advantages import group_advantages
from sapo_lab.objective.gates import soft_gate
from sapo_lab.objective.masks import masked_mean


def per_response(values, mask):
    """The mean over each response's tokens, then over responses (sapo_lab's masked_mean)."""
    return masked_mean(values, mask, "per_response")


def ref_advantages(rewards, eps=1e-6):
    """Part 1: sapo_lab's group advantages (population std)."""
    return group_advantages(rewards, eps)


def ref_masked_mean(values, mask, aggregation="per_response"):
    """Part 2: sapo_lab's masked_mean."""
    return masked_mean(values, mask, aggregation)


def clip_loss(logp, behavior_logp, advantages, mask, eps=0.2):
    """Part 3: GRPO's clipped surrogate loss."""
    r = torch.exp(logp - behavior_logp.detach())
    a = advantages[:, None]
    return per_response(-torch.minimum(r * a, torch.clamp(r, 1 - eps, 1 + eps) * a), mask)


def sapo_token_loss(logp, behavior_logp, advantages, tau_pos, tau_neg):
    """SAPO's per-token loss -A f_tau(r) (B, T), tau_pos where A > 0 and tau_neg elsewhere."""
    r = torch.exp(logp - behavior_logp.detach())
    a = advantages[:, None].expand_as(logp)
    tau = torch.where(a > 0, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
    return -a * soft_gate(r, tau)


def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
    """Part 5: SAPO's loss, the per-token loss aggregated per response."""
    return per_response(sapo_token_loss(logp, behavior_logp, advantages, tau_pos, tau_neg), mask)


def seq_ratio(logp, behavior_logp, mask):
    """Part 6: GSPO's sequence ratio (B,): the exponential of each response's mean log ratio."""
    z = logp - behavior_logp.detach()
    return torch.exp((z * mask).sum(-1) / mask.sum(-1))


def update(logp, behavior_logp, rewards, mask, tau_pos=1.0, tau_neg=1.05):
    """Part 7: the loss of one update from a (P, G) reward table."""
    return sapo_loss(logp, behavior_logp, ref_advantages(rewards).reshape(-1), mask, tau_pos, tau_neg)


# part -> the reference, called with the skeleton's arguments in the skeleton's order
REFERENCE = {
    "group_advantages": ref_advantages,
    "masked_mean": ref_masked_mean,
    "clipped_surrogate_loss": clip_loss,
    "sapo_gate": lambda ratio, tau: soft_gate(ratio, tau),
    "sapo_loss": sapo_loss,
    "gspo_sequence_ratio": seq_ratio,
    "update_loss": update,
}


def batch(seed: int, prompts: int, group: int, tokens: int, *, far: bool = False) -> dict:
    """One rollout batch in float64: padded responses (one full-length, one single-token), rewards with an
    all-equal group and a single success. ``far`` adds token ratios far from 1 on both sides (up to about
    e^7.5, where exp(x) / (1 + exp(x)) overflows, and down to about e^-4)."""
    gen = torch.Generator().manual_seed(seed)
    n = prompts * group
    lengths = torch.randint(1, tokens + 1, (n,), generator=gen)
    lengths[0] = tokens
    lengths[-1] = 1
    mask = (torch.arange(tokens)[None, :] < lengths[:, None]).to(torch.float64)
    behavior = -1.5 + 0.6 * torch.randn(n, tokens, generator=gen, dtype=torch.float64)
    log_ratio = 0.45 * torch.randn(n, tokens, generator=gen, dtype=torch.float64)
    if far:
        far_high = torch.rand(n, tokens, generator=gen) < 0.2
        far_low = (torch.rand(n, tokens, generator=gen) < 0.2) & ~far_high
        log_ratio = torch.where(far_high, 1.0 + 6.5 * torch.rand(n, tokens, generator=gen, dtype=torch.float64),
                                log_ratio)
        log_ratio = torch.where(far_low, -1.0 - 3.0 * torch.rand(n, tokens, generator=gen, dtype=torch.float64),
                                log_ratio)
        log_ratio[0, 0] = 7.5  # a ratio of about 1800 on a response token, always
    logp = behavior + log_ratio
    rewards = torch.randint(0, 2, (prompts, group), generator=gen).to(torch.float64)
    rewards[0] = 1.0  # a group with equal rewards: advantages exactly 0
    rewards[-1, 0], rewards[-1, 1:] = 1.0, 0.0  # a single success
    adv = group_advantages(rewards).reshape(-1)
    return dict(logp=logp, behavior_logp=behavior, mask=mask, rewards=rewards, advantages=adv)


def fresh_cases(seed: int) -> list[dict]:
    """The batches a grading run draws from ``seed``: ratios far from 1, a G = 2 batch, padded responses."""
    gen = torch.Generator().manual_seed(seed)
    seeds = torch.randint(0, 2**31 - 1, (3,), generator=gen).tolist()
    return [batch(seeds[0], 3, 4, 6, far=True), batch(seeds[1], 4, 2, 5, far=True), batch(seeds[2], 2, 5, 7)]


# part -> the handout's defaults of its optional arguments (the skeleton's signatures)
DEFAULTS = {"group_advantages": {"eps": 1e-6}, "clipped_surrogate_loss": {"eps": 0.2},
            "sapo_loss": {"tau_pos": 1.0, "tau_neg": 1.05}, "update_loss": {"tau_pos": 1.0, "tau_neg": 1.05}}


def long_responses(seed: int, tokens: int = 1000) -> dict:
    """GSPO's case of long responses: ``tokens``-token responses whose log-ratios sum past 709, where a product of
    token ratios overflows float64 (to inf, or to 0 for a negative sum) while the mean log-ratio is about +-0.8."""
    gen = torch.Generator().manual_seed(seed)
    behavior = -1.5 + 0.6 * torch.randn(3, tokens, generator=gen, dtype=torch.float64)
    log_ratio = 0.1 * torch.randn(3, tokens, generator=gen, dtype=torch.float64)
    log_ratio[0] += 0.8
    log_ratio[1] -= 0.8
    mask = torch.ones(3, tokens, dtype=torch.float64)
    mask[2, tokens // 2:] = 0.0  # and one padded to half the length
    return dict(logp=behavior + log_ratio, behavior_logp=behavior, mask=mask)


def arguments(part: str, case: dict, settings: dict | None = None) -> dict:
    """The keyword arguments of one graded call of ``part`` on a batch (tensors as given to the student).

    ``settings`` (``eps``, ``advantage_eps`` for group_advantages' eps, ``tau_pos``, ``tau_neg``): None passes the
    temperatures and the clip's eps at the handout's defaults and leaves group_advantages' eps to its default, as
    the frozen cases do; a dict passes its values and leaves out the ones it lacks, so that the student's function
    runs on its own defaults (which must be the handout's)."""
    given = ({**DEFAULTS["clipped_surrogate_loss"], **DEFAULTS["sapo_loss"]} if settings is None
             else dict(settings))
    c = case
    if part == "group_advantages":
        return {"rewards": c["rewards"], **({"eps": given["advantage_eps"]} if "advantage_eps" in given else {})}
    if part == "masked_mean":
        return {"values": c["logp"], "mask": c["mask"]}  # called once per aggregation, and once without it
    if part == "sapo_gate":
        return {"ratio": torch.exp(c["logp"] - c["behavior_logp"]).reshape(-1),
                "tau": given.get("tau_neg", DEFAULTS["sapo_loss"]["tau_neg"])}
    common = {"logp": c["logp"], "behavior_logp": c["behavior_logp"], "mask": c["mask"]}
    temperatures = {k: given[k] for k in ("tau_pos", "tau_neg") if k in given}
    if part == "clipped_surrogate_loss":
        return {**common, "advantages": c["advantages"], **({"eps": given["eps"]} if "eps" in given else {})}
    if part == "sapo_loss":
        return {**common, "advantages": c["advantages"], **temperatures}
    if part == "gspo_sequence_ratio":
        return common
    if part == "update_loss":
        return {**common, "rewards": c["rewards"], **temperatures}
    raise KeyError(part)
