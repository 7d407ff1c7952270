"""Policy losses for group-based LLM RL: SAPO, GRPO's PPO clip, and GSPO.

All of them (and the §14.2 ablation kernels of :mod:`sapo_lab.objective.kernels`) share one
pipeline (Algorithm 2 of the review):

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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import NonFiniteError
from .clip import check_clip_eps
from .gates import check_temperature, log_gate_weight, log_update_coefficient_from_log_ratio
from .kernels import gaussian_token_surrogate, log_directional_gate_from_log_ratio, log_gaussian_gate_from_log_ratio
from .masks import AGGREGATIONS, aggregation_weights, check_mask

LOSS_TYPES = ("sapo", "grpo", "gspo", "sapo_directional", "gauss")
# Kernels that take SAPO's temperatures (tau_pos / tau_neg); the others take the clip epsilons.
# The review's §14.2 ablation: grpo (directional hard clip), sapo_directional (directional
# smooth clip), sapo (bidirectional smooth), gauss (another smooth shape); see sapo_lab.objective.kernels.
SMOOTH_LOSS_TYPES = ("sapo", "sapo_directional", "gauss")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
MAX_LOG_RATIO_POLICIES = ("record", "skip", "error")


class _CentredSoftGate(torch.autograd.Function):
    """(2/tau) tanh(tau (e^z - 1) / 2) with d/dz = e^z w_tau(e^z), computed in log space.

    The backward uses differentiable torch ops, so double backward (Hessians,
    meta-gradients) works too.
    """

    @staticmethod
    def forward(ctx, z, tau):
        ctx.save_for_backward(z, tau)
        return (2.0 / tau) * torch.tanh(tau * torch.expm1(z) / 2.0)

    @staticmethod
    def backward(ctx, grad_out):
        z, tau = ctx.saved_tensors
        return grad_out * torch.exp(log_update_coefficient_from_log_ratio(z, tau)), None


def token_temperatures(token_adv: torch.Tensor, tau_pos: float, tau_neg: float) -> torch.Tensor:
    """SAPO's sign rule: tau_pos where A > 0, tau_neg where A <= 0 (a constant under autograd)."""
    return torch.where(token_adv > 0, torch.full_like(token_adv, float(tau_pos)), torch.full_like(token_adv, float(tau_neg)))


def sapo_token_surrogate(log_ratio: torch.Tensor, tau) -> torch.Tensor:
    """Centred SAPO surrogate as a function of the log ratio (an objective to maximize)."""
    tau = torch.as_tensor(tau, dtype=log_ratio.dtype, device=log_ratio.device)
    tau = torch.broadcast_to(tau, log_ratio.shape).contiguous()
    return _CentredSoftGate.apply(log_ratio, tau)


def clip_token_surrogate(log_ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float):
    """min(rA, clip(r)A) / A written so that saturated tokens never touch exp(z).

    Returns (surrogate without the factor A, active mask). Where the clip is active the
    surrogate is r and its z-derivative is r; elsewhere it is the constant bound.
    """
    with torch.no_grad():
        r = torch.exp(log_ratio)
        active = ((adv > 0) & (r < 1.0 + eps_high)) | ((adv < 0) & (r > 1.0 - eps_low))
        bound = torch.where(adv > 0, torch.full_like(r, 1.0 + eps_high), torch.full_like(r, 1.0 - eps_low))
    safe_z = torch.where(active, log_ratio, torch.zeros_like(log_ratio))
    return torch.where(active, torch.exp(safe_z), bound), active


def directional_token_surrogate(log_ratio: torch.Tensor, adv: torch.Tensor, tau) -> torch.Tensor:
    """Directional smooth clip as a function of the log ratio (an objective to maximize).

    SAPO's centred gate on the side the hard clip would cut (z > 0 for A > 0, z < 0 for
    A < 0), the unclipped ``e^z - 1`` on the other. Each branch sees a masked copy of z,
    so a branch not taken never meets a huge e^z (0 * inf in the backward); A = 0 tokens
    take the soft branch, whose coefficient is always finite (their loss is 0 anyway).
    """
    with torch.no_grad():
        identity = ((adv > 0) & (log_ratio <= 0)) | ((adv < 0) & (log_ratio >= 0))
    zeros = torch.zeros_like(log_ratio)
    soft = sapo_token_surrogate(torch.where(identity, zeros, log_ratio), tau)
    return torch.where(identity, torch.expm1(torch.where(identity, log_ratio, zeros)), soft)


def kernel_log_gate(loss_type: str, log_ratio: torch.Tensor, adv: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """log w(r) of a smooth kernel at r = e^z: the log of the share of |A| r the kernel keeps."""
    if loss_type == "sapo":
        return log_gate_weight(torch.exp(log_ratio), tau)
    if loss_type == "sapo_directional":
        return log_directional_gate_from_log_ratio(log_ratio, adv, tau)
    if loss_type == "gauss":
        return log_gaussian_gate_from_log_ratio(log_ratio, tau)
    raise ValueError(f"kernel_log_gate is defined for {SMOOTH_LOSS_TYPES}, got {loss_type!r}")


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
        bad = m & ~torch.isfinite(t.detach())
        if bool(bad.any()):
            where = [tuple(int(i) for i in idx) for idx in bad.nonzero()[:5]]
            raise NonFiniteError(f"{name} is NaN or infinite at valid (response, token) positions {where}")
    if not bool(torch.isfinite(advantages.detach()).all()):
        raise NonFiniteError("advantages contain NaN or inf")
    return m


def _quantiles(x: torch.Tensor, prefix: str, qs=(0.05, 0.5, 0.95)) -> dict:
    if x.numel() == 0:
        return {f"{prefix}_q{round(q * 100):02d}": float("nan") for q in qs}
    vals = torch.quantile(x.double(), torch.tensor(qs, dtype=torch.float64, device=x.device))
    return {f"{prefix}_q{round(q * 100):02d}": float(v) for q, v in zip(qs, vals, strict=True)}


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
    loss_type : "sapo" | "grpo" | "gspo" | "sapo_directional" | "gauss"
        ``grpo`` is PPO's clipped surrogate on token ratios; ``gspo`` is the same clip on
        the sequence ratio. ``sapo_directional`` applies SAPO's gate only on the side the
        clip would cut (identity on the other); ``gauss`` is a Gaussian gate with SAPO's
        slope and half-width at r = 1 (:mod:`sapo_lab.objective.kernels`). Both use tau_pos/tau_neg.
    tau_pos, tau_neg : SAPO temperatures for A > 0 and A <= 0 (TRL's
        ``sapo_temperature_pos`` / ``sapo_temperature_neg``), for every smooth kernel.
    clip_eps_low, clip_eps_high : clip range [1 - low, 1 + high] for grpo/gspo.
    importance_sampling_level : "token" | "sequence" | None
        None means "sequence" for gspo and "token" otherwise. Sequence level replaces
        every token's log ratio by its response's mean log ratio.
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
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if importance_sampling_level is None:
        importance_sampling_level = "sequence" if loss_type == "gspo" else "token"
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"importance_sampling_level must be one of {IMPORTANCE_SAMPLING_LEVELS}, got {importance_sampling_level!r}"
        )
    if loss_type == "gspo" and importance_sampling_level != "sequence":
        raise ValueError("loss_type='gspo' is the clip on the sequence ratio; use loss_type='grpo' for token ratios")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if max_log_ratio_policy not in MAX_LOG_RATIO_POLICIES:
        raise ValueError(f"max_log_ratio_policy must be one of {MAX_LOG_RATIO_POLICIES}, got {max_log_ratio_policy!r}")
    if not float(max_log_ratio) > 0:
        raise ValueError(f"max_log_ratio must be > 0, got {max_log_ratio!r}")
    if loss_type in SMOOTH_LOSS_TYPES:
        check_temperature(tau_pos)
        check_temperature(tau_neg)
    else:
        check_clip_eps(clip_eps_low, clip_eps_high)
    valid = _check_inputs(logp, behavior_logp, advantages, mask)

    dtype = logp.dtype
    behavior = behavior_logp.detach().to(dtype)
    adv = advantages.detach().to(dtype)
    token_z = torch.where(valid, logp - behavior, torch.zeros_like(logp))
    lengths = valid.sum(dim=-1)

    if importance_sampling_level == "sequence":
        seq_z = token_z.sum(dim=-1) / lengths.clamp(min=1).to(dtype)
        z = torch.where(valid, seq_z[:, None].expand_as(token_z), torch.zeros_like(token_z))
        beyond_resp = (seq_z.detach().abs() > max_log_ratio) & (lengths > 0)
        beyond = valid & beyond_resp[:, None]
    else:
        z = token_z
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
    if loss_type == "sapo":
        tau = token_temperatures(a_tok, tau_pos, tau_neg)
        surrogate = sapo_token_surrogate(z, tau)
        active = None
    elif loss_type == "sapo_directional":
        tau = token_temperatures(a_tok, tau_pos, tau_neg)
        surrogate = directional_token_surrogate(z, a_tok, tau)
        active = None
    elif loss_type == "gauss":
        tau = token_temperatures(a_tok, tau_pos, tau_neg)
        surrogate = gaussian_token_surrogate(z, tau)
        active = None
    else:
        surrogate, active = clip_token_surrogate(z, a_tok, clip_eps_low, clip_eps_high)
    token_loss = -a_tok * surrogate
    weight = aggregation_weights(used, aggregation, dtype=dtype)
    loss = torch.where(used, weight * token_loss, torch.zeros_like(token_loss)).sum()

    stats: dict = {}
    if compute_stats:
        with torch.no_grad():
            stats = _loss_stats(token_z, z, a_tok, used, valid, lengths, weight, active,
                                tau if loss_type in SMOOTH_LOSS_TYPES else None, loss_type=loss_type)
            stats.update(
                loss_type=loss_type,
                importance_sampling_level=importance_sampling_level,
                aggregation=aggregation,
                beyond_max_log_ratio=n_beyond,
                skipped_tokens=n_beyond if max_log_ratio_policy == "skip" else 0,
                max_log_ratio=float(max_log_ratio),
            )
    return PolicyLossOutput(loss=loss, stats=stats, token_loss=token_loss, token_weight=weight)


def _loss_stats(token_z, z, a_tok, used, valid, lengths, weight, active, tau, loss_type="sapo") -> dict:
    zd = z.double()[used]
    ratio = torch.exp(zd)
    a = a_tok.double()[used]
    if tau is not None and loss_type != "sapo":
        log_gate = kernel_log_gate(loss_type, zd, a, tau.double()[used])
        log_coef = zd + log_gate
    elif tau is not None:
        t = tau.double()[used]
        log_gate = log_gate_weight(ratio, t)  # log(c / r) = log w
        log_coef = log_update_coefficient_from_log_ratio(zd, t)
    else:
        act = active[used]
        log_gate = torch.where(act, torch.zeros_like(zd), torch.full_like(zd, float("-inf")))
        log_coef = torch.where(act, zd, torch.full_like(zd, float("-inf")))
    coef = torch.exp(log_coef)
    # Fraction of |A| * r (the unclipped importance-weighted update) that the surrogate
    # removes, weighted like the loss; softmax over log weights keeps it finite when r overflows.
    signed = a != 0
    if bool(signed.any()):
        log_mass = torch.log(weight.double()[used][signed] * a[signed].abs()) + zd[signed]
        share = torch.softmax(log_mass, dim=0)
        removed = float((share * (1.0 - torch.exp(log_gate[signed]))).sum())
    else:
        removed = 0.0
    tz = token_z.double()[valid]
    split = signal_removed_split(zd, a, weight.double()[used], log_gate)
    out = {
        "valid_tokens": int(valid.sum()),
        "used_tokens": int(used.sum()),
        "responses": int(lengths.numel()),
        "empty_responses": int((lengths == 0).sum()),
        "tokens_pos": int((a > 0).sum()),
        "tokens_neg": int((a < 0).sum()),
        "tokens_zero": int((a == 0).sum()),
        "max_abs_log_ratio": float(tz.abs().max()),
        "signal_removed_frac": removed,
        "approx_kl": float((torch.expm1(tz) - tz).mean()),
    }
    out.update(split)
    out.update(_quantiles(ratio, "ratio"))
    out.update(_quantiles(coef, "coef"))
    if active is not None:
        out["clip_frac"] = float(((~active[used]) & signed).double().mean())
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
    out: dict = {}
    signed = adv != 0
    if not bool(signed.any()):
        for sign, side in SIGNAL_CELLS:
            out[f"signal_removed_frac_{sign}_{side}"] = float("nan")
            out[f"signal_share_{sign}_{side}"] = 0.0
        out["signal_removed_frac_pos"] = out["signal_removed_frac_neg"] = float("nan")
        return out
    z, a, lg = log_ratio[signed], adv[signed], log_gate[signed]
    log_mass = torch.log(weight[signed] * a.abs()) + z
    lost = 1.0 - torch.exp(lg)  # the share of each token's unclipped signal the kernel removes

    def removed_in(cell):
        if not bool(cell.any()):
            return float("nan")
        return float((torch.softmax(log_mass[cell], dim=0) * lost[cell]).sum())

    share = torch.softmax(log_mass, dim=0)
    sides = {"below": z < 0, "above": z > 0}
    for sign, sign_cell in (("pos", a > 0), ("neg", a < 0)):
        out[f"signal_removed_frac_{sign}"] = removed_in(sign_cell)
        for side, side_cell in sides.items():
            cell = sign_cell & side_cell
            out[f"signal_removed_frac_{sign}_{side}"] = removed_in(cell)
            out[f"signal_share_{sign}_{side}"] = float(share[cell].sum())
    return out
