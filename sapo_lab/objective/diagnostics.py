"""Per-step training diagnostics (review §15, Algorithm 4 steps 4-5; §9; §14.1), as pure functions.

Every function takes tensors in the loss library's layout -- ``(batch, tokens)`` log ratios,
masks and entropies, ``(batch,)`` advantages, ``(prompts, G)`` rewards -- and returns a flat
dict of python numbers ready for a metrics row. Nothing here imports the trainer or the
CLI; the gradient comparison only needs the current log-probs with their autograd graph
(or per-token score vectors).

Token- versus sequence-level gradients (§9, §14.1)
--------------------------------------------------
For response i with length T_i, advantage A_i and aggregation weight
beta_i = sum_t alpha_{i,t}, write the loss gradients as sums of score vectors
h_{i,t} = grad_theta log p_theta(y_{i,t}):

    G_tok = -sum_i beta_i A_i (1/T_i) sum_t c_{i,t} h_{i,t},    c_{i,t} = r_{i,t} w(r_{i,t}),
    G_seq = -sum_i beta_i A_i c(s_i) hbar_i,                     s_i = exp(mean_t z_{i,t}),

with ``c`` the kernel's coefficient (SAPO: r w_tau(r)) and hbar_i the mean score vector.
Adding and subtracting cbar_i hbar_i (cbar_i = mean_t c_{i,t}) splits the difference exactly:

    G_tok - G_seq = COV + GAP,
    COV = -sum_i beta_i A_i (1/T_i) sum_t (c_{i,t} - cbar_i) h_{i,t}     (vector / coherence term),
    GAP = -sum_i beta_i A_i (cbar_i - c(s_i)) hbar_i                     (scalar gate-gap term).

This is the review's §9 identity with the exact coefficients ``policy_loss`` differentiates
in place of the approximate gates g_t (book chapter 9). Only GAP is controlled by a
statement about scalars; the review's §8 bound speaks to its approximate-gate version,
|mean_t g_tau(z_t) - g_tau(mu)| <= tau^2 V / 4 with g_tau(z) = sech^2(tau z / 2),
mu = mean_t z_t and V the within-response variance of z, which is reported alongside.

The per-token weights of the four vectors come from autograd of ``policy_loss`` itself
(at ``importance_sampling_level`` "token" and "sequence") with respect to the log-probs,
so they are exactly the package's gradients; each vector is then one vector-Jacobian
product through the model (or a contraction with given score vectors).
"""

from __future__ import annotations

import torch

from .fast_paths import mask_positions, quantile_stats, take
from .gates import gate_weight, token_temperatures
from .losses import policy_loss
from .masks import aggregation_weights, check_mask
from .registry import kernel_for

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
TOKSEQ_METRICS = ("cos", "abs_err", "cov_norm", "scalar_norm", "tok_norm", "seq_norm", "responses")


def _check_2d(name: str, t: torch.Tensor, mask: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor) or t.shape != mask.shape:
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} must be a tensor shaped like mask {tuple(mask.shape)}, got {shape}")


def _check_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> None:
    if not isinstance(advantages, torch.Tensor) or advantages.shape != mask.shape[:1]:
        shape = tuple(advantages.shape) if isinstance(advantages, torch.Tensor) else type(advantages).__name__
        raise ValueError(f"advantages must be shaped (batch,) = ({mask.shape[0]},), got {shape}")


# --- rollout-batch statistics ---------------------------------------------------------------------

def advantage_sign_counts(advantages: torch.Tensor, mask: torch.Tensor | None = None) -> dict:
    """Responses (and, with a mask, valid tokens) with A > 0, A < 0 and A = 0.

    Keys: ``adv_pos``, ``adv_neg``, ``adv_zero``; with ``mask`` also ``adv_pos_tokens``,
    ``adv_neg_tokens``, ``adv_zero_tokens``.
    """
    a = advantages.detach()
    signs = torch.stack((a > 0, a < 0, a == 0))  # (3, batch): integer counts from one tensor, read back at once
    out = dict(zip(("adv_pos", "adv_neg", "adv_zero"), signs.sum(-1).tolist(), strict=True))
    if mask is not None:
        _check_advantages(a, mask)
        lengths = check_mask(mask).sum(-1)
        tokens = (signs * lengths).sum(-1).tolist()
        out.update(zip(("adv_pos_tokens", "adv_neg_tokens", "adv_zero_tokens"), tokens, strict=True))
    return out


def zero_advantage_groups(rewards: torch.Tensor) -> dict:
    """Groups whose G rewards are all equal (every advantage 0: the group teaches nothing).

    ``rewards`` is (prompts, G). Keys: ``zero_advantage_groups``, ``zero_advantage_group_frac``,
    ``zero_advantage_responses`` (responses in such groups).
    """
    if rewards.ndim != 2 or rewards.numel() == 0:
        raise ValueError(f"rewards must be a non-empty (prompts, G) tensor, got shape {tuple(rewards.shape)}")
    r = rewards.detach()
    flat = (r == r[:, :1]).all(dim=1)
    n = int(flat.sum())
    return {"zero_advantage_groups": n, "zero_advantage_group_frac": n / r.shape[0],
            "zero_advantage_responses": n * r.shape[1]}


def response_length_stats(mask: torch.Tensor, truncated: torch.Tensor | None = None) -> dict:
    """Valid response lengths: mean, min, max, median, 90th percentile, empty count, truncated fraction.

    ``truncated`` (batch,) bool marks responses cut at ``max_completion_length`` (optional).
    Keys: ``response_length_{mean,min,max,q50,q90}``, ``empty_responses``, and ``truncated_frac``.
    """
    lengths = check_mask(mask).sum(-1).double()
    out = {
        "response_length_mean": float(lengths.mean()),
        "response_length_min": int(lengths.min()),
        "response_length_max": int(lengths.max()),
        "empty_responses": int((lengths == 0).sum()),
    }
    # None, not NaN, where there is nothing to measure: a metrics row holds null there
    out.update(quantile_stats(lengths, "response_length", (0.5, 0.9), empty=None))
    if truncated is not None:
        if truncated.shape != lengths.shape:
            raise ValueError(f"truncated must be shaped ({lengths.numel()},), got {tuple(truncated.shape)}")
        out["truncated_frac"] = float(truncated.bool().double().mean())
    return out


def entropy_stats(entropy: torch.Tensor, mask: torch.Tensor) -> dict:
    """Per-token policy entropy over valid response tokens: token mean, response mean, quantiles.

    ``entropy_mean`` pools every valid token; ``entropy_response_mean`` averages each
    response's mean (so long responses do not dominate). Plus ``entropy_q05/q50/q95``.
    """
    _check_2d("entropy", entropy, mask)
    m = check_mask(mask)
    if not bool(m.any()):
        raise ValueError("mask selects no valid token")
    e = entropy.detach().double()
    vals = e[m]
    lengths = m.sum(-1)
    per_resp = torch.where(m, e, torch.zeros_like(e)).sum(-1)[lengths > 0] / lengths[lengths > 0]
    out = {"entropy_mean": float(vals.mean()), "entropy_response_mean": float(per_resp.mean())}
    out.update(quantile_stats(vals, "entropy", (0.05, 0.5, 0.95), empty=None))
    return out


def ratio_quantiles(
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    quantiles=QUANTILES,
) -> dict:
    """Quantiles of r = e^z and of SAPO's coefficient r w_tau(r) over valid tokens, also by advantage sign.

    ``log_ratio`` is z = log p - log b per token (any level). tau follows SAPO's sign rule.
    Keys: ``ratio_qXX``, ``rw_qXX`` (all valid tokens) and ``ratio_pos_qXX``, ``ratio_neg_qXX``,
    ``rw_pos_qXX``, ``rw_neg_qXX``; r w(r) is computed in log space (finite where r overflows).
    """
    _check_2d("log_ratio", log_ratio, mask)
    _check_advantages(advantages, mask)
    m = check_mask(mask)
    z = log_ratio.detach().double()
    a = advantages.detach().double()[:, None].expand_as(z)
    tau = token_temperatures(a, tau_pos, tau_neg)
    r = torch.exp(z)
    rw = torch.exp(z + torch.log(gate_weight(r, tau)))
    out: dict = {}
    for suffix, sel in (("", m), ("_pos", m & (a > 0)), ("_neg", m & (a < 0))):
        at = mask_positions(sel)  # one nonzero for both gathers
        out.update(quantile_stats(take(r, at), f"ratio{suffix}", quantiles, empty=None))
        out.update(quantile_stats(take(rw, at), f"rw{suffix}", quantiles, empty=None))
    return out


def step_diagnostics(
    *,
    rewards: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor | None = None,
    log_ratio: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> dict:
    """All per-step scalar diagnostics in one row: the union of the functions above.

    ``log_ratio`` should hold the ratios the update actually saw (for example each
    response's z at the minibatch it was trained in); without it the ratio keys are left out.
    """
    out = advantage_sign_counts(advantages, mask)
    out.update(zero_advantage_groups(rewards))
    out.update(response_length_stats(mask, truncated))
    if entropy is not None:
        out.update(entropy_stats(entropy, mask))
    if log_ratio is not None:
        out.update(ratio_quantiles(log_ratio, mask, advantages, tau_pos=tau_pos, tau_neg=tau_neg))
    return out


# --- token- versus sequence-level gradients ---------------------------------------------------------

def cosine(a: torch.Tensor, b: torch.Tensor, tiny: float = 1e-12) -> float:
    """Cosine similarity with the declared low-norm convention: 1 if both norms < tiny, 0 if one is."""
    na, nb = float(a.norm()), float(b.norm())
    if na < tiny and nb < tiny:
        return 1.0
    if na < tiny or nb < tiny:
        return 0.0
    return float((a @ b) / (na * nb))


def token_sequence_weights(
    logp: torch.Tensor,
    behavior_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "sapo",
    loss_scale: float = 1.0,
    **loss_kwargs,
) -> dict:
    """Per-token weights (batch, tokens) whose contraction with score vectors gives each gradient.

    ``token``/``sequence``: d loss / d logp at the two importance-sampling levels (float64);
    ``covariance`` = token weight minus its within-response mean; ``scalar_gap`` = that mean
    minus the sequence weight (constant within a response). ``token == sequence +
    covariance + scalar_gap`` elementwise. ``loss_scale`` multiplies the loss (the trainer
    rescales minibatches whose zero-advantage rows it skipped). Also returns ``coef_gap``
    (batch,): cbar_i - c(s_i), nan for A_i = 0 or empty responses.
    """
    kernel = kernel_for(loss_type)
    for level in ("token", "sequence"):
        if (problem := kernel.level_error(level)) is not None:
            raise ValueError(f"{problem}; the comparison needs both levels")
    for key in ("importance_sampling_level", "compute_stats"):
        if key in loss_kwargs:
            raise ValueError(f"{key} is set by the comparison itself; do not pass it")
    m = check_mask(mask)
    weights = {}
    for level in ("token", "sequence"):
        x = logp.detach().double().requires_grad_(True)
        out = policy_loss(x, behavior_logp.detach().double(), advantages.detach().double(), m, loss_type=loss_type,
                          importance_sampling_level=level, compute_stats=False, **loss_kwargs)
        (weights[level],) = torch.autograd.grad(out.loss * loss_scale, x)
    lengths = m.sum(-1)
    mean_tok = weights["token"].sum(-1) / lengths.clamp(min=1)
    zeros = torch.zeros_like(weights["token"])
    weights["covariance"] = torch.where(m, weights["token"] - mean_tok[:, None], zeros)
    weights["scalar_gap"] = torch.where(m, mean_tok[:, None] - weights["sequence"], zeros)
    # Undo -A_i beta_i / T_i (and the loss scale) to express the gap in coefficient units.
    beta = aggregation_weights(m, loss_kwargs.get("aggregation", "per_response"), dtype=torch.float64).sum(-1)
    a = advantages.detach().double()
    per_token = -a * beta * loss_scale / lengths.clamp(min=1)
    seq_w = torch.where(m, weights["sequence"], zeros).sum(-1) / lengths.clamp(min=1)
    ok = (a != 0) & (lengths > 0)
    weights["coef_gap"] = torch.where(ok, (mean_tok - seq_w) / torch.where(ok, per_token, 1.0), float("nan"))
    return weights


def approximate_gate_gap(log_ratio: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor,
                         *, tau_pos: float = 1.0, tau_neg: float = 1.05) -> tuple[torch.Tensor, torch.Tensor]:
    """Per response: |mean_t g_tau(z_t) - g_tau(mu)| and the review's §8 bound tau^2 V / 4.

    g_tau(z) = sech^2(tau z / 2) is SAPO's gate after r - 1 ~ log r; tau by the sign rule.
    Returns two (batch,) float64 tensors (0 for empty responses).
    """
    m = check_mask(mask)
    z = torch.where(m, log_ratio.detach().double(), torch.zeros_like(log_ratio, dtype=torch.float64))
    a = advantages.detach().double()
    tau = torch.where(a > 0, float(tau_pos), float(tau_neg))
    n = m.sum(-1).clamp(min=1)
    mu = z.sum(-1) / n
    var = torch.where(m, (z - mu[:, None]) ** 2, torch.zeros_like(z)).sum(-1) / n
    g = torch.where(m, 1.0 / torch.cosh(tau[:, None] * z / 2) ** 2, torch.zeros_like(z))
    gap = (g.sum(-1) / n - 1.0 / torch.cosh(tau * mu / 2) ** 2).abs()
    return torch.where(m.any(-1), gap, 0.0), tau**2 * var / 4


def _strata(log_ratio, m, signed, length_edges, tail_log_ratio) -> dict:
    lengths = m.sum(-1)
    strata = {}
    if length_edges is None:
        split = float(lengths[signed].double().median()) if bool(signed.any()) else 0.0
        strata["len_short"] = lengths <= split
        strata["len_long"] = lengths > split
    else:
        edges = sorted(int(e) for e in length_edges)
        lo = -1
        for e in edges:
            strata[f"len_le{e}"] = (lengths > lo) & (lengths <= e)
            lo = e
        strata[f"len_gt{lo}"] = lengths > lo
    far = torch.where(m, log_ratio.detach().abs(), torch.zeros_like(log_ratio)).amax(-1) > tail_log_ratio
    strata["ratio_bulk"] = ~far
    strata["ratio_tail"] = far
    return {k: v & signed & (lengths > 0) for k, v in strata.items()}


def token_sequence_gradient_comparison(
    logp: torch.Tensor,
    behavior_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    params=None,
    scores: torch.Tensor | None = None,
    loss_type: str = "sapo",
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    length_edges=None,
    tail_log_ratio: float = 0.2,
    low_norm: float = 1e-12,
    loss_scale: float = 1.0,
    **loss_kwargs,
) -> dict:
    """Compare the token- and sequence-level gradients of one minibatch, with both decomposition terms.

    Give either ``params`` (the model's parameters; ``logp`` must carry its autograd graph,
    which is kept: ``retain_graph``) or ``scores`` (batch, tokens, D) per-token score
    vectors h_{i,t}. See the module docstring for G_tok, G_seq, COV and GAP. Keys
    (``tokseq_`` prefix):

    * ``cos`` (cosine of G_tok and G_seq, low-norm convention of :func:`cosine`),
      ``abs_err`` = |G_tok - G_seq|, ``rel_err`` = abs_err / |G_tok| (None if |G_tok| < low_norm),
      ``tok_norm``, ``seq_norm``, ``cov_norm`` = |COV|, ``scalar_norm`` = |GAP|, ``responses``;
    * ``coef_gap_mean`` / ``coef_gap_max``: |cbar_i - c(s_i)| over signed responses (the
      scalar gate-approximation error in exact coefficients), and ``gate_gap_mean`` /
      ``gate_gap_max`` / ``gate_gap_bound_mean``: the review's approximate-gate gap and its
      tau^2 V / 4 bound (SAPO's gate, whatever ``loss_type``);
    * with ``scores`` also ``cov_cs_bound``: sum_i beta_i |A_i| sd_t(c_{i,t}) rms_t|h_{i,t}|,
      the Cauchy-Schwarz bound on |COV|;
    * per stratum S: ``tokseq_{S}_{cos,abs_err,cov_norm,scalar_norm,tok_norm,seq_norm,responses}``,
      the same vectors restricted to S's responses (with the whole minibatch's weights, so
      strata of one split add up to the total). Strata: response length (``len_short`` /
      ``len_long`` split at the median signed-response length, or ``len_le{e}`` ... ``len_gt{e}``
      for ``length_edges``) and ratio tails (``ratio_tail``: some token has
      |log r| > ``tail_log_ratio``; ``ratio_bulk``: none). An empty stratum reports
      ``responses`` 0 and None elsewhere.

    Only responses with A != 0 contribute (the others have no gradient).
    """
    if (params is None) == (scores is None):
        raise ValueError("pass exactly one of params (autograd through logp) or scores (per-token score vectors)")
    m = check_mask(mask)
    _check_2d("logp", logp, m)
    _check_advantages(advantages, m)
    kw = dict(loss_kwargs, tau_pos=tau_pos, tau_neg=tau_neg)
    w = token_sequence_weights(logp, behavior_logp, advantages, m, loss_type=loss_type, loss_scale=loss_scale, **kw)
    z = torch.where(m, logp.detach().double() - behavior_logp.detach().double(), 0.0)
    signed = (advantages.detach() != 0) & m.any(-1)

    if params is not None:
        params = [p for p in params if p.requires_grad]

        def project(weight):
            grads = torch.autograd.grad(logp, params, grad_outputs=weight.to(logp.dtype), retain_graph=True,
                                        allow_unused=True)
            return torch.cat([(torch.zeros_like(p) if g is None else g).flatten() for p, g in zip(params, grads,
                                                                                                     strict=True)]).double()
    else:
        if scores.shape[:2] != m.shape:
            raise ValueError(f"scores must be shaped (batch, tokens, D) with (batch, tokens) = {tuple(m.shape)}, "
                             f"got {tuple(scores.shape)}")
        h = scores.detach().double()

        def project(weight):
            return torch.einsum("bt,btd->d", weight, h)

    # Every stratum is a union of cells (length bin x tail/bulk), and every vector is linear in
    # the weights, so three vector-Jacobian products per non-empty cell give all the vectors:
    # token, covariance and scalar gap (sequence = token - covariance - scalar gap, exactly).
    strata = _strata(z, m, signed, length_edges, tail_log_ratio)
    length_names = [k for k in strata if k.startswith("len_")]
    cells = {}
    for ln in length_names:
        for tn in ("ratio_bulk", "ratio_tail"):
            rows = strata[ln] & strata[tn]
            if bool(rows.any()):
                sel = rows[:, None].to(torch.float64)
                cells[ln, tn] = {k: project(w[k] * sel) for k in ("token", "covariance", "scalar_gap")}

    def vectors(keys):
        parts = [cells[c] for c in keys if c in cells]
        vec = {k: sum(p[k] for p in parts) for k in ("token", "covariance", "scalar_gap")}
        vec["sequence"] = vec["token"] - vec["covariance"] - vec["scalar_gap"]
        return vec

    def metrics(vec, rows):
        n = int(rows.sum())
        if n == 0:
            return {k: (0 if k == "responses" else None) for k in TOKSEQ_METRICS}
        return {"cos": cosine(vec["token"], vec["sequence"], low_norm),
                "abs_err": float((vec["covariance"] + vec["scalar_gap"]).norm()),
                "cov_norm": float(vec["covariance"].norm()), "scalar_norm": float(vec["scalar_gap"].norm()),
                "tok_norm": float(vec["token"].norm()), "seq_norm": float(vec["sequence"].norm()), "responses": n}

    all_cells = list(cells)
    total = metrics(vectors(all_cells), signed)
    out = {f"tokseq_{k}": v for k, v in total.items()}
    out["tokseq_rel_err"] = (total["abs_err"] / total["tok_norm"]
                             if total["tok_norm"] is not None and total["tok_norm"] >= low_norm else None)
    coef_gap = w["coef_gap"][signed].abs()
    gate_gap, gate_bound = approximate_gate_gap(z, m, advantages, tau_pos=tau_pos, tau_neg=tau_neg)
    has = bool(signed.any())
    out["tokseq_coef_gap_mean"] = float(coef_gap.mean()) if has else None
    out["tokseq_coef_gap_max"] = float(coef_gap.max()) if has else None
    out["tokseq_gate_gap_mean"] = float(gate_gap[signed].mean()) if has else None
    out["tokseq_gate_gap_max"] = float(gate_gap[signed].max()) if has else None
    out["tokseq_gate_gap_bound_mean"] = float(gate_bound[signed].mean()) if has else None
    if scores is not None:
        n = m.sum(-1).clamp(min=1)
        c_unit = torch.where(m, w["covariance"], 0.0)  # = -beta_i A_i (c - cbar) / T_i
        sd_part = c_unit.pow(2).sum(-1).div(n).sqrt() * n          # beta_i |A_i| sd_t(c)
        rms_h = torch.where(m, h.pow(2).sum(-1), 0.0).sum(-1).div(n).sqrt()
        out["tokseq_cov_cs_bound"] = float((sd_part * rms_h)[signed].sum())
    for name, rows in strata.items():
        keys = [c for c in all_cells if name in c]
        out.update({f"tokseq_{name}_{k}": v for k, v in metrics(vectors(keys), rows).items()})
    return out
