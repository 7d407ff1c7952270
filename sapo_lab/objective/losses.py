"""Policy losses for group-based LLM RL: SAPO, GRPO's PPO clip, and GSPO.

All of them (and the §14.2 ablation kernels of :mod:`sapo_lab.objective.kernels`) share one
pipeline (Algorithm 2 of the review); each is a row of :data:`sapo_lab.objective.registry.KERNELS`:

1. ``z = logp - behavior_logp`` on the valid response tokens (behavior log-probs are
   frozen: they carry no gradient);
2. at ``importance_sampling_level="sequence"`` every token of a response uses the
   response's mean log ratio (the log of the geometric mean of its token ratios);
3. a per-token surrogate ``-A * s(z)`` with the advantage ``A`` of the response;
4. the declared aggregation (:mod:`sapo_lab.objective.masks`).

SAPO's surrogate is the centred gate ``(4/tau)[sigmoid(tau(r-1)) - 1/2]`` with
``tau = tau_pos`` where ``A > 0`` and ``tau_neg`` where ``A <= 0``. Its gradient in
``z`` is ``r * w_tau(r)``, evaluated in log space so that a stale token whose ratio
overflows gets the exact coefficient 0 rather than ``0 * inf = NaN``.

What is there only for speed (the remembered settings check, finiteness from one sum, gathers
in place of boolean indexing, quantiles from one sort) is in :mod:`sapo_lab.objective.fast_paths`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import NonFiniteError
from .choices import MAX_LOG_RATIO_POLICIES
from .fast_paths import check_settings, finite_by_sum, mask_positions, quantile_stats, take
from .masks import AGGREGATIONS, aggregation_weights, check_mask
from .registry import IMPORTANCE_SAMPLING_LEVELS, kernel_for, resolved_level
from .registry import LOSS_TYPES as LOSS_TYPES  # re-exported: sapo_lab.LOSS_TYPES and the book import it from here


@dataclass
class PolicyLossOutput:
    """``loss``: scalar to minimize. ``stats``: python floats for logging.

    ``token_loss`` and ``token_weight`` are per-token (batch, tokens) tensors with
    ``loss == (token_weight * token_loss).sum()`` over valid tokens.
    """

    loss: torch.Tensor
    stats: dict = field(default_factory=dict)
    token_loss: torch.Tensor | None = None
    token_weight: torch.Tensor | None = None


def _check_inputs(logp, behavior_logp, advantages, mask):
    for name, t in (("logp", logp), ("behavior_logp", behavior_logp), ("advantages", advantages), ("mask", mask)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if logp.ndim != 2:
        raise ValueError(f"logp must be shaped (batch, tokens), got shape {tuple(logp.shape)}")
    if behavior_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(
            "logp, behavior_logp and mask must have the same (batch, tokens) shape, got "
            f"{tuple(logp.shape)}, {tuple(behavior_logp.shape)}, {tuple(mask.shape)}"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"advantages must be shaped (batch,) = ({logp.shape[0]},), one per response; got {tuple(advantages.shape)}"
        )
    if logp.numel() == 0:
        raise ValueError(f"empty batch: logp has shape {tuple(logp.shape)}")
    if not torch.is_floating_point(logp):
        raise ValueError(f"logp must be a floating-point tensor, got {logp.dtype}")
    m = check_mask(mask)
    if not bool(m.any()):
        raise ValueError("mask selects no valid token: every response is empty")
    for name, t in (("logp", logp), ("behavior_logp", behavior_logp)):
        if finite_by_sum(t):
            continue
        bad = m & ~torch.isfinite(t.detach())
        if bool(bad.any()):
            where = [tuple(int(i) for i in idx) for idx in bad.nonzero()[:5]]
            raise NonFiniteError(f"{name} is NaN or infinite at valid (response, token) positions {where}")
    if not finite_by_sum(advantages) and not bool(torch.isfinite(advantages.detach()).all()):
        raise NonFiniteError("advantages contain NaN or inf")
    return m


def policy_loss(
    logp: torch.Tensor,
    behavior_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "sapo",
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    importance_sampling_level: str | None = None,
    aggregation: str = "per_response",
    max_log_ratio: float = 20.0,
    max_log_ratio_policy: str = "record",
    compute_stats: bool = True,
) -> PolicyLossOutput:
    """The policy loss of one update minibatch.

    Parameters
    ----------
    logp, behavior_logp, mask : (batch, tokens)
        Current and frozen behavior log-probs of the sampled response tokens, and the
        0/1 mask of valid response tokens (prompt and padding are 0).
    advantages : (batch,)
        One fixed advantage per response (no gradient flows into it).
    loss_type : a key of :data:`~sapo_lab.objective.registry.KERNELS` (``LOSS_TYPES``)
        ``sapo``, ``grpo`` (PPO's clip on token ratios), ``gspo`` (the same clip on the
        sequence ratio), ``sapo_directional`` (SAPO's gate only on the side the clip would
        cut) or ``gauss`` (a Gaussian gate with SAPO's slope and half-width at r = 1).
    tau_pos, tau_neg : SAPO temperatures for A > 0 and A <= 0 (TRL's
        ``sapo_temperature_pos`` / ``sapo_temperature_neg``), for every smooth kernel.
    clip_eps_low, clip_eps_high : clip range [1 - low, 1 + high] for the clip kernels.
        A kernel reads only the settings its registry row names (``Kernel.reads``).
    importance_sampling_level : "token" | "sequence" | None
        None means the kernel's default ("sequence" for gspo, "token" otherwise). Sequence
        level replaces every token's log ratio by its response's mean log ratio.
    aggregation : "per_response" | "token_pool" (see :mod:`sapo_lab.objective.masks`).
    max_log_ratio, max_log_ratio_policy :
        Tokens (or, at sequence level, responses) with ``|log ratio| > max_log_ratio``
        are counted in ``stats["beyond_max_log_ratio"]``; ``"record"`` keeps them,
        ``"skip"`` removes them from the loss (counted in ``stats["skipped_tokens"]``;
        the response's valid length L_i shrinks accordingly, so with ``per_response``
        its remaining tokens weigh more),
        ``"error"`` raises ``ValueError``. Nothing is ever clamped silently.
    compute_stats : skip the diagnostics (quantiles etc.) when False.
    """
    kernel = kernel_for(loss_type)
    importance_sampling_level = resolved_level(loss_type, importance_sampling_level)
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {importance_sampling_level!r}"
        )
    if (problem := kernel.level_error(importance_sampling_level)) is not None:
        raise ValueError(problem)
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if max_log_ratio_policy not in MAX_LOG_RATIO_POLICIES:
        raise ValueError(f"max_log_ratio_policy must be one of {MAX_LOG_RATIO_POLICIES}, got {max_log_ratio_policy!r}")
    if not float(max_log_ratio) > 0:
        raise ValueError(f"max_log_ratio must be > 0, got {max_log_ratio!r}")
    given = {"tau_pos": tau_pos, "tau_neg": tau_neg, "clip_eps_low": clip_eps_low, "clip_eps_high": clip_eps_high}
    settings = [given[name] for name in kernel.reads]
    check_settings(kernel, settings)
    valid = _check_inputs(logp, behavior_logp, advantages, mask)

    dtype = logp.dtype
    behavior = behavior_logp.detach().to(dtype)
    adv = advantages.detach().to(dtype)
    token_z = torch.where(valid, logp - behavior, torch.zeros_like(logp))
    lengths = valid.sum(dim=-1)

    z = level_log_ratio(token_z, valid, importance_sampling_level)
    # at sequence level every token of a response carries its mean, so a response is in or out as a whole
    beyond = valid & (z.detach().abs() > max_log_ratio)
    n_beyond = int(beyond.sum())
    if n_beyond and max_log_ratio_policy == "error":
        worst = float(z.detach()[beyond].abs().max())
        raise ValueError(
            f"{n_beyond} token(s) have |log ratio| > max_log_ratio={max_log_ratio} (largest {worst:.4g}); "
            "the rollout batch is too stale for this policy"
        )
    used = valid & ~beyond if max_log_ratio_policy == "skip" else valid
    if not bool(used.any()):
        raise ValueError("every valid token was skipped by max_log_ratio_policy='skip'")

    a_tok = adv[:, None].expand_as(z)
    surrogate, gate_state = kernel.token_surrogate(z, a_tok, *settings)
    token_loss = -a_tok * surrogate
    weight = aggregation_weights(used, aggregation, dtype=dtype)
    loss = torch.where(used, weight * token_loss, torch.zeros_like(token_loss)).sum()

    stats: dict = {}
    if compute_stats:
        with torch.no_grad():
            stats = _loss_stats(token_z, z, a_tok, used, valid, lengths, weight, kernel, gate_state)
            stats.update(
                loss_type=loss_type,
                importance_sampling_level=importance_sampling_level,
                aggregation=aggregation,
                beyond_max_log_ratio=n_beyond,
                skipped_tokens=n_beyond if max_log_ratio_policy == "skip" else 0,
                max_log_ratio=float(max_log_ratio),
            )
    return PolicyLossOutput(loss=loss, stats=stats, token_loss=token_loss, token_weight=weight)


def level_log_ratio(token_log_ratio: torch.Tensor, valid: torch.Tensor, level: str) -> torch.Tensor:
    """The log ratio each token's surrogate sees: its own at ``"token"`` level; at ``"sequence"`` level
    its response's mean over the valid tokens (GSPO's length-normalised sequence ratio). 0 off the mask.

    ``token_log_ratio`` is ``log pi - log b`` per token, already 0 where ``valid`` is False.
    """
    if level != "sequence":
        return token_log_ratio
    lengths = valid.sum(dim=-1).clamp(min=1).to(token_log_ratio.dtype)
    mean = token_log_ratio.sum(dim=-1) / lengths
    return torch.where(valid, mean[:, None].expand_as(token_log_ratio), torch.zeros_like(token_log_ratio))


def _loss_stats(token_z, z, a_tok, used, valid, lengths, weight, kernel, gate_state) -> dict:
    # Every mask is turned into positions once and each tensor gathered from them; the
    # statistics are computed on exactly the tensors boolean indexing would give.
    used_at = mask_positions(used)
    valid_at = used_at if used is valid else mask_positions(valid)
    zd = take(z, used_at).double()
    ratio = torch.exp(zd)
    a = take(a_tok, used_at).double()
    state = take(gate_state, used_at)
    log_gate, log_coef = kernel.log_weights(zd, a, state.double() if state.is_floating_point() else state)
    coef = torch.exp(log_coef)
    signed = a != 0
    tz = take(token_z, valid_at).double()
    # signal_removed_frac: the fraction of |A| * r (the unclipped importance-weighted update)
    # that the surrogate removes, weighted like the loss (see signal_removed_split).
    split, removed = _signal_split(zd, a, take(weight, used_at).double(), log_gate)
    positive, negative = int((a > 0).sum()), int((a < 0).sum())
    out = {
        "valid_tokens": valid_at.numel(),
        "used_tokens": used_at.numel(),
        "responses": int(lengths.numel()),
        "empty_responses": int((lengths == 0).sum()),
        "tokens_pos": positive,
        "tokens_neg": negative,
        "tokens_zero": used_at.numel() - positive - negative,  # advantages are finite (checked): the rest are 0
        "max_abs_log_ratio": float(tz.abs().max()),
        "signal_removed_frac": removed,
        "approx_kl": float((torch.expm1(tz) - tz).mean()),
    }
    out.update(split)
    out.update(quantile_stats(ratio, "ratio"))
    out.update(quantile_stats(coef, "coef"))
    if kernel.hard_clip:  # the share of signed tokens the clip silences (gate exactly 0)
        out["clip_frac"] = float(((log_gate == float("-inf")) & signed).double().mean())
    return out


def kl_to_reference(
    logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, aggregation: str = "per_response"
) -> torch.Tensor:
    """KL(pi_theta || pi_ref) from sampled tokens by the k3 estimator, aggregated like the policy loss.

    Per valid token, with ``d = ref_logp - logp``: ``k3 = exp(d) - d - 1`` (>= 0, unbiased
    for the KL under samples from pi_theta). ``aggregation`` is the policy loss's
    (:mod:`sapo_lab.objective.masks`): ``per_response`` averages each response's tokens and then
    the non-empty responses; ``token_pool`` averages all valid tokens. The reference is
    frozen: the gradient flows into ``logp`` only.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if logp.shape != ref_logp.shape or logp.shape != mask.shape:
        raise ValueError(f"logp, ref_logp and mask must share a shape, got {tuple(logp.shape)}, {tuple(ref_logp.shape)}, "
                         f"{tuple(mask.shape)}")
    m = check_mask(mask)
    zero = torch.zeros_like(logp)
    d = torch.where(m, ref_logp.detach().to(logp.dtype) - logp, zero)
    k3 = torch.where(m, torch.exp(d) - d - 1.0, zero)
    lengths = m.sum(dim=-1)
    if not bool((lengths > 0).any()):
        raise ValueError("mask selects no valid token: every response is empty")
    if aggregation == "token_pool":
        return k3.sum() / lengths.sum()
    return (k3.sum(dim=-1) / lengths.clamp(min=1))[lengths > 0].mean()


SIGNAL_CELLS = (("pos", "below"), ("pos", "above"), ("neg", "below"), ("neg", "above"))


def signal_removed_split(log_ratio: torch.Tensor, adv: torch.Tensor, weight: torch.Tensor, log_gate: torch.Tensor) -> dict:
    """``signal_removed_frac`` split by advantage sign and by side of r = 1.

    All inputs are 1-D over the tokens that enter the loss: log ratio z, advantage A,
    aggregation weight alpha and the kernel's log gate log w(r) (log 0 = -inf where a
    clip saturates). The unclipped signal of a token is ``alpha |A| r``; the kernel keeps
    ``alpha |A| r w(r)``. For a cell C (A > 0 or A < 0; r < 1 "below" or r > 1 "above")

        signal_removed_frac_{sign}_{side} = sum_C alpha |A| r (1 - w) / sum_C alpha |A| r,
        signal_share_{sign}_{side}        = sum_C alpha |A| r / sum_{A != 0} alpha |A| r,

    and ``signal_removed_frac_{sign}`` is the same ratio over both sides. At sequence level
    z and r are the response's (every token of a response is on the same side). Tokens at r = 1
    exactly lose nothing under any kernel and belong to neither side, so
    ``signal_removed_frac == sum_C share_C * removed_C``. A cell without signal reports
    nan (undefined, not zero). Sums are taken as softmaxes over log masses, so they stay
    finite where r overflows.
    """
    return _signal_split(log_ratio, adv, weight, log_gate)[0]


def _signal_split(log_ratio, adv, weight, log_gate) -> tuple[dict, float]:
    """:func:`signal_removed_split`'s dict and the overall ``signal_removed_frac`` (0.0 without signal)."""
    out: dict = {}
    signed_at = mask_positions(adv != 0)
    if signed_at.numel() == 0:
        for sign, side in SIGNAL_CELLS:
            out[f"signal_removed_frac_{sign}_{side}"] = float("nan")
            out[f"signal_share_{sign}_{side}"] = 0.0
        out["signal_removed_frac_pos"] = out["signal_removed_frac_neg"] = float("nan")
        return out, 0.0
    z, a, lg = (t.index_select(0, signed_at) for t in (log_ratio, adv, log_gate))
    log_mass = torch.log(weight.index_select(0, signed_at) * a.abs()) + z
    lost = 1.0 - torch.exp(lg)  # the share of each token's unclipped signal the kernel removes

    def removed_in(at):
        if at.numel() == 0:
            return float("nan")
        return float((torch.softmax(log_mass.index_select(0, at), dim=0) * lost.index_select(0, at)).sum())

    share = torch.softmax(log_mass, dim=0)
    sides = {"below": z < 0, "above": z > 0}
    for sign, sign_cell in (("pos", a > 0), ("neg", a < 0)):
        out[f"signal_removed_frac_{sign}"] = removed_in(mask_positions(sign_cell))
        for side, side_cell in sides.items():
            at = mask_positions(sign_cell & side_cell)
            out[f"signal_removed_frac_{sign}_{side}"] = removed_in(at)
            out[f"signal_share_{sign}_{side}"] = float(share.index_select(0, at).sum())
    return out, float((share * lost).sum())
