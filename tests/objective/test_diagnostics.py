"""sapo_lab.objective.diagnostics against independent computations: loops, numpy, per-token autograd, the review's example."""

import math
import statistics
import subprocess
import sys

import numpy as np
import pytest
import torch

from sapo_lab import mask_from_lengths, policy_loss
from sapo_lab.objective.diagnostics import (
    advantage_sign_counts,
    cosine,
    entropy_stats,
    ratio_quantiles,
    response_length_stats,
    step_diagnostics,
    token_sequence_gradient_comparison,
    token_sequence_weights,
    zero_advantage_groups,
)

pytestmark = pytest.mark.usefixtures("float64_by_default")  # closed forms compared at float64 precision


def sech2(x):
    return 1.0 / math.cosh(x) ** 2


# --- scalar diagnostics ---------------------------------------------------------------------------

def test_advantage_sign_counts_match_a_loop():
    adv = torch.tensor([0.5, -1.0, 0.0, 2.0, 0.0, -0.1])
    mask = mask_from_lengths([3, 1, 4, 0, 2, 5], 5)
    out = advantage_sign_counts(adv, mask)
    lengths = [3, 1, 4, 0, 2, 5]
    assert (out["adv_pos"], out["adv_neg"], out["adv_zero"]) == (2, 2, 2)
    assert out["adv_pos_tokens"] == sum(n for a, n in zip(adv.tolist(), lengths, strict=True) if a > 0) == 3
    assert out["adv_neg_tokens"] == 6 and out["adv_zero_tokens"] == 6


def test_zero_advantage_groups_counts_flat_groups_only():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.3, 0.3, 0.30001]])
    out = zero_advantage_groups(rewards)
    flat = [len(set(row)) == 1 for row in rewards.tolist()]
    assert out["zero_advantage_groups"] == sum(flat) == 2
    assert out["zero_advantage_group_frac"] == 0.5 and out["zero_advantage_responses"] == 6
    with pytest.raises(ValueError, match="prompts, G"):
        zero_advantage_groups(torch.ones(4))


def test_response_length_stats_match_statistics_module():
    lengths = [3, 0, 7, 7, 2, 5, 1]
    out = response_length_stats(mask_from_lengths(lengths, 8), truncated=torch.tensor([0, 0, 1, 1, 0, 0, 0]).bool())
    assert out["response_length_mean"] == pytest.approx(statistics.mean(lengths))
    assert out["response_length_q50"] == statistics.median(lengths)
    assert out["response_length_q90"] == pytest.approx(float(np.quantile(lengths, 0.9)))
    assert (out["response_length_min"], out["response_length_max"], out["empty_responses"]) == (0, 7, 1)
    assert out["truncated_frac"] == pytest.approx(2 / 7)


def test_entropy_stats_ignore_padding_and_weigh_responses_equally():
    entropy = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 99.0, 99.0, 99.0]])
    mask = mask_from_lengths([3, 1], 4)
    out = entropy_stats(entropy, mask)
    assert out["entropy_mean"] == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert out["entropy_response_mean"] == pytest.approx((2.0 + 4.0) / 2)
    assert out["entropy_q50"] == pytest.approx(float(np.quantile([1, 2, 3, 4], 0.5)))


def test_ratio_and_coefficient_quantiles_match_numpy():
    g = torch.Generator().manual_seed(0)
    z = 0.7 * torch.randn(6, 5, generator=g)
    z[0, 0] = 800.0                                   # r overflows in float64: r w(r) must still be 0
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0, -2.0, 1.0])
    mask = mask_from_lengths([5, 3, 4, 2, 5, 1], 5)
    out = ratio_quantiles(z, mask, adv, tau_pos=1.0, tau_neg=1.5)
    r_all, rw_all, r_pos, rw_neg = [], [], [], []
    for i, t in mask.nonzero().tolist():
        zi, a = float(z[i, t]), float(adv[i])
        tau = 1.0 if a > 0 else 1.5
        r = math.exp(zi) if zi < 700 else math.inf
        rw = 0.0 if math.isinf(r) else r * sech2(tau * (r - 1) / 2)
        r_all.append(r)
        rw_all.append(rw)
        if a > 0:
            r_pos.append(r)
        if a < 0:
            rw_neg.append(rw)
    assert out["rw_q50"] == pytest.approx(float(np.quantile(rw_all, 0.5)), rel=1e-12)
    assert out["rw_q99"] == pytest.approx(float(np.quantile(rw_all, 0.99)), rel=1e-12)
    assert out["ratio_q25"] == pytest.approx(float(np.quantile(r_all, 0.25)), rel=1e-12)
    assert out["ratio_pos_q05"] == pytest.approx(float(np.quantile(r_pos, 0.05)), rel=1e-12)
    assert out["rw_neg_q75"] == pytest.approx(float(np.quantile(rw_neg, 0.75)), rel=1e-12)
    assert all(v is None or math.isfinite(v) for k, v in out.items() if k.startswith("rw"))


def test_step_diagnostics_is_the_union_and_skips_ratio_keys_without_ratios():
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    adv = torch.tensor([1.0, -1.0, 0.0, 0.0])
    mask = mask_from_lengths([2, 3, 1, 3], 3)
    row = step_diagnostics(rewards=rewards, advantages=adv, mask=mask, entropy=torch.ones(4, 3))
    assert row["zero_advantage_groups"] == 1 and row["adv_pos"] == 1 and row["entropy_mean"] == 1.0
    assert "ratio_q50" not in row
    row = step_diagnostics(rewards=rewards, advantages=adv, mask=mask, log_ratio=torch.zeros(4, 3))
    assert row["ratio_q50"] == 1.0 and row["rw_q50"] == 1.0


# --- token- vs sequence-level gradients ------------------------------------------------------------

class TinyPolicy(torch.nn.Module):
    """A linear softmax policy: logits = x W + b, so log p of a token depends on shared parameters."""

    def __init__(self, dim=5, vocab=7, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.W = torch.nn.Parameter(torch.randn(dim, vocab, generator=g))
        self.b = torch.nn.Parameter(0.3 * torch.randn(vocab, generator=g))

    def forward(self, x, y):
        return torch.log_softmax(x @ self.W + self.b, dim=-1).gather(-1, y[..., None])[..., 0]


def tiny_batch(seed=0, batch=8, tokens=6, spread=0.4, lengths=None):
    g = torch.Generator().manual_seed(seed)
    model = TinyPolicy(seed=seed)
    x = torch.randn(batch, tokens, 5, generator=g)
    y = torch.randint(0, 7, (batch, tokens), generator=g)
    logp = model(x, y)
    behavior = logp.detach() + spread * torch.randn(batch, tokens, generator=g)
    adv = torch.randn(batch, generator=g)
    adv[1] = 0.0
    if lengths is None:
        lengths = torch.randint(1, tokens + 1, (batch,), generator=g)
    return model, logp, behavior, adv, mask_from_lengths(lengths, tokens)


def per_token_scores(model, logp, mask):
    """h_{i,t} = grad log p_{i,t}, one autograd call per token (what the diagnostic avoids)."""
    params = list(model.parameters())
    h = torch.zeros(*mask.shape, sum(p.numel() for p in params))
    for i, t in mask.nonzero().tolist():
        grads = torch.autograd.grad(logp[i, t], params, retain_graph=True)
        h[i, t] = torch.cat([g.flatten() for g in grads])
    return h


def reference_decomposition(logp, behavior, adv, mask, h, tau_pos=1.0, tau_neg=1.05, rows=None):
    """G_tok, G_seq, COV, GAP for per_response SAPO from closed-form coefficients c = r sech^2(tau (r-1)/2)."""
    lengths = mask.sum(-1).tolist()
    n = sum(1 for x in lengths if x > 0)
    d = h.shape[-1]
    g_tok, g_seq, cov, gap = (torch.zeros(d) for _ in range(4))
    for i in range(mask.shape[0]):
        a = float(adv[i])
        if lengths[i] == 0 or a == 0 or (rows is not None and not rows[i]):
            continue
        tau = tau_pos if a > 0 else tau_neg
        ts = [t for t in range(mask.shape[1]) if mask[i, t]]
        zs = [float(logp[i, t] - behavior[i, t]) for t in ts]
        cs = [math.exp(z) * sech2(tau * (math.exp(z) - 1) / 2) for z in zs]
        s = math.exp(sum(zs) / len(zs))
        c_seq = s * sech2(tau * (s - 1) / 2)
        c_bar = sum(cs) / len(cs)
        h_bar = sum(h[i, t] for t in ts) / len(ts)
        scale = -a / n                       # -beta_i A_i with beta_i = 1 / N under per_response
        g_tok += scale * sum(c * h[i, t] for c, t in zip(cs, ts, strict=True)) / len(ts)
        g_seq += scale * c_seq * h_bar
        cov += scale * sum((c - c_bar) * h[i, t] for c, t in zip(cs, ts, strict=True)) / len(ts)
        gap += scale * (c_bar - c_seq) * h_bar
    return g_tok, g_seq, cov, gap


def test_weights_reproduce_policy_loss_gradients_at_both_levels():
    model, logp, behavior, adv, mask = tiny_batch(seed=1)
    w = token_sequence_weights(logp, behavior, adv, mask)
    for level in ("token", "sequence"):
        x = logp.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(policy_loss(x, behavior, adv, mask, importance_sampling_level=level).loss, x)
        assert torch.allclose(w[level], g, rtol=1e-13, atol=1e-16)
    assert torch.allclose(w["token"], w["sequence"] + w["covariance"] + w["scalar_gap"], atol=1e-15)


@pytest.mark.parametrize("source", ["params", "scores"])
def test_comparison_matches_per_token_score_vector_reference(source):
    model, logp, behavior, adv, mask = tiny_batch(seed=2, spread=0.5)
    h = per_token_scores(model, logp, mask)
    g_tok, g_seq, cov, gap = reference_decomposition(logp.detach(), behavior, adv, mask, h)
    kw = dict(params=list(model.parameters())) if source == "params" else dict(scores=h)
    out = token_sequence_gradient_comparison(logp, behavior, adv, mask, **kw)
    ref_cos = float(g_tok @ g_seq / (g_tok.norm() * g_seq.norm()))
    assert out["tokseq_cos"] == pytest.approx(ref_cos, rel=1e-10)
    assert out["tokseq_abs_err"] == pytest.approx(float((g_tok - g_seq).norm()), rel=1e-9)
    assert out["tokseq_cov_norm"] == pytest.approx(float(cov.norm()), rel=1e-9)
    assert out["tokseq_scalar_norm"] == pytest.approx(float(gap.norm()), rel=1e-9)
    assert out["tokseq_tok_norm"] == pytest.approx(float(g_tok.norm()), rel=1e-10)
    assert out["tokseq_rel_err"] == pytest.approx(float((g_tok - g_seq).norm() / g_tok.norm()), rel=1e-9)
    assert 0 < out["tokseq_scalar_norm"] < out["tokseq_cov_norm"]   # both terms present on this batch
    # The token-level vector is the package's own gradient through the model.
    flat = torch.cat([p.flatten() for p in torch.autograd.grad(policy_loss(logp, behavior, adv, mask).loss,
                                                                  list(model.parameters()), retain_graph=True)])
    assert float(flat.norm()) == pytest.approx(out["tokseq_tok_norm"], rel=1e-10)
    if source == "scores":   # Cauchy-Schwarz per response, then the triangle inequality over responses
        bound, n = 0.0, int((mask.sum(-1) > 0).sum())
        for i in range(mask.shape[0]):
            a, ts = float(adv[i]), mask[i].nonzero().flatten().tolist()
            tau = 1.0 if a > 0 else 1.05
            cs = [math.exp(float(logp[i, t].detach() - behavior[i, t])) for t in ts]
            cs = [r * sech2(tau * (r - 1) / 2) for r in cs]
            sd = statistics.pstdev(cs)
            rms = math.sqrt(sum(float(h[i, t] @ h[i, t]) for t in ts) / len(ts))
            bound += abs(a) / n * sd * rms
        assert out["tokseq_cov_cs_bound"] == pytest.approx(bound, rel=1e-9)
        assert float(cov.norm()) <= bound


def test_scalar_gaps_match_closed_forms_and_obey_the_variance_bound():
    model, logp, behavior, adv, mask = tiny_batch(seed=3, spread=0.3)
    out = token_sequence_gradient_comparison(logp, behavior, adv, mask, params=list(model.parameters()))
    logp = logp.detach()
    coef_gaps, gate_gaps, bounds = [], [], []
    for i in range(mask.shape[0]):
        a = float(adv[i])
        if a == 0:
            continue
        tau = 1.0 if a > 0 else 1.05
        zs = [float(logp[i, t] - behavior[i, t]) for t in range(mask.shape[1]) if mask[i, t]]
        mu = sum(zs) / len(zs)
        cs = [math.exp(z) * sech2(tau * math.expm1(z) / 2) for z in zs]
        coef_gaps.append(abs(sum(cs) / len(cs) - math.exp(mu) * sech2(tau * math.expm1(mu) / 2)))
        gate_gaps.append(abs(sum(sech2(tau * z / 2) for z in zs) / len(zs) - sech2(tau * mu / 2)))
        bounds.append(tau**2 * statistics.pvariance(zs) / 4)
    assert out["tokseq_coef_gap_mean"] == pytest.approx(statistics.mean(coef_gaps), rel=1e-9)
    assert out["tokseq_coef_gap_max"] == pytest.approx(max(coef_gaps), rel=1e-9)
    assert out["tokseq_gate_gap_mean"] == pytest.approx(statistics.mean(gate_gaps), rel=1e-9)
    assert out["tokseq_gate_gap_bound_mean"] == pytest.approx(statistics.mean(bounds), rel=1e-9)
    assert all(gg <= b + 1e-15 for gg, b in zip(gate_gaps, bounds, strict=True))


def test_the_reviews_two_token_example():
    # Review §9: z = (-0.4, 0.4), tau = 1, h = (1, -1). Gate gap about 0.0390 inside the bound 0.04;
    # exact token-level coefficient (1/T) sum c_t h_t about -0.3763; the sequence level gives 0.
    z = torch.tensor([[-0.4, 0.4]])
    h = torch.tensor([[[1.0], [-1.0]]])
    out = token_sequence_gradient_comparison(z, torch.zeros_like(z), torch.tensor([1.0]), torch.ones_like(z).bool(),
                                             scores=h, tau_pos=1.0, tau_neg=1.0)
    assert out["tokseq_gate_gap_max"] == pytest.approx(0.0390, abs=5e-5)
    assert out["tokseq_gate_gap_bound_mean"] == pytest.approx(0.04, rel=1e-12)
    assert out["tokseq_abs_err"] == pytest.approx(0.3763, abs=5e-5)          # G_tok = -A * (-0.3763), G_seq = 0
    assert out["tokseq_cov_norm"] == pytest.approx(0.3763, abs=5e-5) and out["tokseq_scalar_norm"] == 0
    assert out["tokseq_seq_norm"] == 0 and out["tokseq_cos"] == 0.0         # low-norm convention: one zero


def test_strata_restrict_the_vectors_and_partition_the_responses():
    lengths = torch.tensor([2, 6, 3, 5, 6, 1, 4, 6])
    model, logp, behavior, adv, mask = tiny_batch(seed=4, spread=0.05, lengths=lengths)
    behavior = behavior.clone()
    behavior[3, 1] = logp[3, 1].detach() - 0.5                            # responses 3 and 6 reach the tail
    behavior[6, 0] = logp[6, 0].detach() + 0.4
    h = per_token_scores(model, logp, mask)
    out = token_sequence_gradient_comparison(logp, behavior, adv, mask, params=list(model.parameters()),
                                             tail_log_ratio=0.3, length_edges=(3,))
    signed = [float(a) != 0 for a in adv]
    tail = [i in (3, 6) for i in range(8)]
    groups = {
        "ratio_tail": [s and t for s, t in zip(signed, tail, strict=True)],
        "ratio_bulk": [s and not t for s, t in zip(signed, tail, strict=True)],
        "len_le3": [s and int(n) <= 3 for s, n in zip(signed, lengths, strict=True)],
        "len_gt3": [s and int(n) > 3 for s, n in zip(signed, lengths, strict=True)],
    }
    for name, rows in groups.items():
        g_tok, g_seq, cov, gap = reference_decomposition(logp.detach(), behavior, adv, mask, h, rows=rows)
        assert out[f"tokseq_{name}_responses"] == sum(rows) > 0, name
        assert out[f"tokseq_{name}_abs_err"] == pytest.approx(float((g_tok - g_seq).norm()), rel=1e-8), name
        assert out[f"tokseq_{name}_cov_norm"] == pytest.approx(float(cov.norm()), rel=1e-8), name
        assert out[f"tokseq_{name}_scalar_norm"] == pytest.approx(float(gap.norm()), rel=1e-8), name
        assert out[f"tokseq_{name}_cos"] == pytest.approx(float(g_tok @ g_seq / (g_tok.norm() * g_seq.norm())),
                                                          rel=1e-9), name
    default = token_sequence_gradient_comparison(logp, behavior, adv, mask, params=list(model.parameters()))
    assert default["tokseq_len_short_responses"] + default["tokseq_len_long_responses"] == sum(signed)


def test_on_policy_batch_agrees_exactly_and_empty_strata_report_none():
    model, logp, _, adv, mask = tiny_batch(seed=5)
    out = token_sequence_gradient_comparison(logp, logp.detach(), adv, mask, params=list(model.parameters()))
    assert out["tokseq_cos"] == pytest.approx(1.0, abs=1e-12) and out["tokseq_abs_err"] < 1e-12
    assert out["tokseq_ratio_tail_responses"] == 0 and out["tokseq_ratio_tail_cos"] is None
    zero = token_sequence_gradient_comparison(logp, logp.detach(), torch.zeros(8), mask, params=list(model.parameters()))
    assert zero["tokseq_responses"] == 0 and zero["tokseq_cos"] is None and zero["tokseq_rel_err"] is None


def test_other_kernels_and_bad_arguments():
    model, logp, behavior, adv, mask = tiny_batch(seed=6)
    params = list(model.parameters())
    for kind in ("grpo", "sapo_directional", "gauss"):
        out = token_sequence_gradient_comparison(logp, behavior, adv, mask, params=params, loss_type=kind)
        assert -1 <= out["tokseq_cos"] <= 1 and out["tokseq_cov_norm"] > 0
    with pytest.raises(ValueError, match="gspo"):
        token_sequence_gradient_comparison(logp, behavior, adv, mask, params=params, loss_type="gspo")
    with pytest.raises(ValueError, match="exactly one"):
        token_sequence_gradient_comparison(logp, behavior, adv, mask)
    with pytest.raises(ValueError, match="importance_sampling_level"):
        token_sequence_weights(logp, behavior, adv, mask, importance_sampling_level="token")


def test_cosine_low_norm_convention():
    assert cosine(torch.zeros(3), torch.zeros(3)) == 1.0 and cosine(torch.zeros(3), torch.ones(3)) == 0.0
    assert cosine(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0])) == pytest.approx(1 / math.sqrt(2), rel=1e-15)


def test_diagnostics_import_no_training_stack():
    code = ("import sys, sapo_lab.objective.diagnostics; "
            "bad = [m for m in ('sapo_lab.training.trainer', 'sapo_lab.cli', 'transformers') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_aggregation_and_loss_scale_reach_the_comparison():
    model, logp, behavior, adv, mask = tiny_batch(seed=7)
    params = list(model.parameters())
    base = token_sequence_gradient_comparison(logp, behavior, adv, mask, params=params)
    pooled = token_sequence_gradient_comparison(logp, behavior, adv, mask, params=params, aggregation="token_pool")
    half = token_sequence_gradient_comparison(logp, behavior, adv, mask, params=params, loss_scale=0.5)
    flat = torch.cat([p.flatten() for p in torch.autograd.grad(
        policy_loss(logp, behavior, adv, mask, aggregation="token_pool").loss, params, retain_graph=True)])
    assert pooled["tokseq_tok_norm"] == pytest.approx(float(flat.norm()), rel=1e-10)
    assert pooled["tokseq_tok_norm"] != pytest.approx(base["tokseq_tok_norm"], rel=1e-3)
    # The coefficient gap is in coefficient units: the same whatever the aggregation or scale.
    assert pooled["tokseq_coef_gap_mean"] == pytest.approx(base["tokseq_coef_gap_mean"], rel=1e-10)
    assert half["tokseq_coef_gap_mean"] == pytest.approx(base["tokseq_coef_gap_mean"], rel=1e-10)
    assert half["tokseq_abs_err"] == pytest.approx(base["tokseq_abs_err"] / 2, rel=1e-10)
    assert half["tokseq_cos"] == pytest.approx(base["tokseq_cos"], rel=1e-12)
