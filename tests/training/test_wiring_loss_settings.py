"""The trainer's wiring, pinned: each configured loss value reaches policy_loss, and the logged
diagnostics equal independent computations. ``MUTATIONS`` lists the deliberate wiring mutations that
were re-run against these tests and which test fails for each."""

import math

import pytest
import torch
from _micro import QUIET, micro, parity_reward

from sapo_lab.objective.losses import kl_to_reference, policy_loss
from sapo_lab.training.model import response_logprobs
from sapo_lab.training.trainer import Trainer

MUTATIONS = {
    "swap tau_pos/tau_neg in LossConfig.policy_loss_kwargs": "test_every_configured_loss_value_reaches_policy_loss",
    "swap epsilon/epsilon_high in LossConfig.policy_loss_kwargs": "test_every_configured_loss_value_reaches_policy_loss",
    "sign error in the k3 estimator (d = logp - ref_logp)": "test_kl_to_reference_matches_a_per_token_loop",
    "approx_kl replaced by the k1 estimator mean(-z)": "test_approx_kl_and_clip_frac_match_a_loop",
    "trainer passes no aggregation to kl_to_reference": "test_kl_term_enters_the_loss_with_beta",
    "trainer drops the KL term (beta not applied)": "test_kl_term_enters_the_loss_with_beta",
}


def test_every_configured_loss_value_reaches_policy_loss(tmp_path, monkeypatch):
    import sapo_lab.training.update as update_mod

    calls = []
    real = update_mod.policy_loss

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(update_mod, "policy_loss", spy)
    values = dict(loss_type="grpo", sapo_temperature_pos=1.3, sapo_temperature_neg=1.7, epsilon=0.15, epsilon_high=0.33,
                  importance_sampling_level="token", aggregation="token_pool", max_log_ratio=7.0,
                  max_log_ratio_policy="skip")
    t = Trainer(micro(skip_zero_advantage=False, max_steps=1, **values), str(tmp_path), reward_fn=parity_reward, **QUIET)
    t.train_step()
    expected = dict(loss_type="grpo", tau_pos=1.3, tau_neg=1.7, clip_eps_low=0.15, clip_eps_high=0.33,
                    importance_sampling_level="token", aggregation="token_pool", max_log_ratio=7.0,
                    max_log_ratio_policy="skip")
    assert len(calls) == 4 and all(c == expected for c in calls)
    assert micro(epsilon=0.15).loss.policy_loss_kwargs()["clip_eps_high"] == 0.15  # epsilon_high None: symmetric


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(3, 4, generator=g, dtype=torch.float64) * 2
    ref = logp.detach() + 0.4 * torch.randn(3, 4, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    return logp.requires_grad_(True), ref, mask


@pytest.mark.parametrize("aggregation", ["per_response", "token_pool"])
def test_kl_to_reference_matches_a_per_token_loop(aggregation):
    logp, ref, mask = _batch()
    kl = kl_to_reference(logp, ref, mask, aggregation=aggregation)
    per_token = [[(math.exp(q - p) - (q - p) - 1, int(m)) for p, q, m in zip(pr, qr, mr, strict=True)]
                 for pr, qr, mr in zip(logp.tolist(), ref.tolist(), mask.tolist(), strict=True)]
    if aggregation == "per_response":
        means = [sum(v for v, m in row if m) / sum(m for _, m in row) for row in per_token]
        expected = sum(means) / len(means)
    else:
        expected = sum(v for row in per_token for v, m in row if m) / sum(m for row in per_token for _, m in row)
    assert math.isclose(float(kl.detach()), expected, rel_tol=1e-12) and float(kl.detach()) > 0
    # d k3 / d logp = 1 - exp(ref - logp) on valid tokens, times the aggregation weight.
    (grad,) = torch.autograd.grad(kl, logp)
    lengths = mask.sum(-1, keepdim=True)
    weight = mask / (lengths * 3) if aggregation == "per_response" else mask / mask.sum()
    torch.testing.assert_close(grad, weight * (1 - torch.exp(ref - logp.detach())))


def test_approx_kl_and_clip_frac_match_a_loop():
    logp, behavior, mask = _batch(1)
    adv = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    out = policy_loss(logp, behavior, adv, mask, loss_type="grpo", clip_eps_low=0.1, clip_eps_high=0.2)
    zs = [(p - b, a) for pr, br, mr, a in zip(logp.tolist(), behavior.tolist(), mask.tolist(), adv.tolist(), strict=True)
          for p, b, m in zip(pr, br, mr, strict=True) if m]
    assert math.isclose(out.stats["approx_kl"], sum(math.exp(z) - 1 - z for z, _ in zs) / len(zs), rel_tol=1e-12)
    clipped = [(a > 0 and math.exp(z) >= 1.2) or (a < 0 and math.exp(z) <= 0.9) for z, a in zs]
    assert 0 < sum(clipped) < len(zs)  # the batch exercises both cases
    assert math.isclose(out.stats["clip_frac"], sum(clipped) / len(zs), rel_tol=1e-12)


def test_signal_removed_matches_the_gate_weights():
    z = torch.tensor([[0.5], [-0.3], [1.2]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    out = policy_loss(z, torch.zeros_like(z), adv, torch.ones_like(z), tau_pos=1.0, tau_neg=1.05)
    mass, kept = [], []
    for zi, a in zip(z.detach().flatten().tolist(), adv.tolist(), strict=True):
        r, tau = math.exp(zi), (1.0 if a > 0 else 1.05)
        s = 1 / (1 + math.exp(-tau * (r - 1)))
        mass.append(abs(a) * r / 3)  # per_response weight 1/3, one token each
        kept.append(4 * s * (1 - s))  # w_tau(r) = sech^2(tau (r - 1) / 2)
    expected = sum(m * (1 - w) for m, w in zip(mass, kept, strict=True)) / sum(mass)
    assert math.isclose(out.stats["signal_removed_frac"], expected, rel_tol=1e-10)


def test_logged_entropy_is_the_sampling_distributions(tmp_path):
    t = Trainer(micro(max_steps=1, temperature=0.7), str(tmp_path), **QUIET).start()
    from sapo_lab.training.device import ModelTimer

    batch = t.collect_rollout(ModelTimer(t.device))
    _, ent = response_logprobs(t.model, batch.input_ids, batch.attention_mask, batch.response_mask, temperature=0.7,
                               return_entropy=True)
    cm = batch.completion_mask.bool()
    torch.testing.assert_close(batch.entropy[cm], ent[cm], atol=1e-5, rtol=1e-5)
    from sapo_lab.training.metrics import metrics_row
    from sapo_lab.training.update import UpdateResult

    row = metrics_row(1, batch, [UpdateResult(0.0, 0.0, 0)], lr=0.0, loss_type="sapo", counters={}, step_s=1.0,
                      model_s=0.5, elapsed_s=1.0)
    assert math.isclose(row["rollout/entropy_mean"], float(ent[cm].mean()), rel_tol=1e-5)
    assert row["time/non_model_frac"] == 0.5 and row["losses/loss"] == 0.0


def test_kl_term_enters_the_loss_with_beta(tmp_path, monkeypatch):
    import sapo_lab.training.update as update_mod

    seen = {}
    real = update_mod.kl_to_reference

    def spy(logp, ref_logp, mask, aggregation):
        seen["aggregation"] = aggregation
        seen["kl"] = kl = real(logp, ref_logp, mask, aggregation=aggregation)
        return kl

    monkeypatch.setattr(update_mod, "kl_to_reference", spy)
    t = Trainer(micro(beta=0.5, max_steps=1, aggregation="token_pool", steps_per_generation=1), str(tmp_path),
                reward_fn=parity_reward, **QUIET).start()
    # Perturb the policy so the KL to the (cold-start) reference is not zero.
    with torch.no_grad():
        for p in t.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    calls = []
    real_loss = update_mod.policy_loss
    monkeypatch.setattr(update_mod, "policy_loss", lambda *a, **k: calls.append(real_loss(*a, **k)) or calls[-1])
    row = t.train_step()
    assert seen["aggregation"] == "token_pool" and float(seen["kl"]) > 0
    assert math.isclose(row["losses/loss"], float(calls[0].loss) + 0.5 * float(seen["kl"]), rel_tol=1e-6)
    assert math.isclose(row["losses/kl_ref"], float(seen["kl"]), rel_tol=1e-9)
