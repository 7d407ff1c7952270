"""The trainer's per-step diagnostics, pinned: the gradient comparison fires when configured and
changes no number, the pooled ratio quantiles are the quantiles of every trained token, and the
signal split reaches the metrics row.

Mistakes each test catches are named in its docstring."""

import math

import numpy as np
import pytest
import torch
from _micro import QUIET, micro, parity_reward

from sapo_lab.training.trainer import Trainer

TIMING = "time/"  # seconds on this machine


def _trainer(tmp_path, name="run", **extra):
    cfg = micro(**{"skip_zero_advantage": False, "steps_per_generation": 2, **extra})
    return Trainer(cfg, str(tmp_path / name), reward_fn=parity_reward, **QUIET)


def test_gradient_comparison_fires_on_the_configured_steps_and_last_minibatch(tmp_path, monkeypatch):
    """Catches: the interval ignored (every step / never), the wrong minibatch (the first one is on-policy,
    where token and sequence gradients coincide), the loss values not forwarded, GSPO passed through
    (the comparison needs its token-level twin, GRPO's clip)."""
    import sapo_lab.training.update as update_mod

    calls = []
    real = update_mod.token_sequence_gradient_comparison

    def spy(logp, behavior_logp, advantages, mask, **kwargs):
        calls.append(dict(kwargs, rows=logp.shape[0]))
        return real(logp, behavior_logp, advantages, mask, **kwargs)

    monkeypatch.setattr(update_mod, "token_sequence_gradient_comparison", spy)
    import sapo_lab.training.trainer as trainer_mod

    forwards, compared = [], []  # where each minibatch's forward ran; where the comparison followed one
    real_forward, real_compare = trainer_mod.minibatch_forward, trainer_mod.compare_gradients

    def forward_spy(*args, where, **kwargs):
        forwards.append(where)
        return real_forward(*args, where=where, **kwargs)

    def compare_spy(*args, **kwargs):
        compared.append(forwards[-1])
        return real_compare(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "minibatch_forward", forward_spy)
    monkeypatch.setattr(trainer_mod, "compare_gradients", compare_spy)
    t = _trainer(tmp_path, gradient_comparison_every=2, loss_type="gspo", sapo_temperature_pos=1.3,
                 sapo_temperature_neg=1.9, epsilon=0.1, epsilon_high=0.3)
    rows = [t.train_step() for _ in range(4)]
    assert compared == ["step 2, minibatch 1", "step 4, minibatch 1"]
    assert len(calls) == 2
    for c in calls:
        assert c["loss_type"] == "grpo" and c["tau_pos"] == 1.3 and c["tau_neg"] == 1.9
        assert c["clip_eps_low"] == 0.1 and c["clip_eps_high"] == 0.3 and c["loss_scale"] == 1.0
        assert "importance_sampling_level" not in c
    assert ["tokseq/cos" in r for r in rows] == [False, True, False, True]
    assert all(r["time/diagnostics_s"] == 0.0 for r in rows[::2]) and all(r["time/diagnostics_s"] > 0 for r in rows[1::2])
    t0 = _trainer(tmp_path, "off", gradient_comparison_every=0)
    assert not any("tokseq/cos" in t0.train_step() for _ in range(2))


def test_gradient_comparison_changes_no_number(tmp_path):
    """Catches: the comparison drawing from a random stream, leaving gradients in ``.grad`` (a
    ``backward`` instead of ``autograd.grad``), or freeing the graph before the real backward."""
    on, off = _trainer(tmp_path, "on", gradient_comparison_every=1), _trainer(tmp_path, "off", gradient_comparison_every=0)
    for _ in range(3):
        a, b = on.train_step(), off.train_step()
        assert "tokseq/cos" in a and "tokseq/cos" not in b
        shared = {k: v for k, v in b.items() if not k.startswith(TIMING)}
        assert {k: a[k] for k in shared} == shared
    for p, q in zip(on.model.parameters(), off.model.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize("loss_type", ["sapo", "gspo"])
def test_pooled_ratio_quantiles_are_over_every_trained_token(tmp_path, monkeypatch, loss_type):
    """Catches: averaging the K minibatches' quantiles instead of pooling their tokens, quantiles of
    the first minibatch only (all ones: on-policy), padding tokens counted, and at sequence level
    the token ratios reported instead of the sequence ratio the loss used."""
    import sapo_lab.training.update as update_mod

    seen = []
    real = update_mod.policy_loss

    def spy(logp, behavior_logp, advantages, mask, **kwargs):
        seen.append((logp.detach().clone(), behavior_logp.clone(), mask.clone()))
        return real(logp, behavior_logp, advantages, mask, **kwargs)

    monkeypatch.setattr(update_mod, "policy_loss", spy)
    t = _trainer(tmp_path, loss_type=loss_type, steps_per_generation=4, learning_rate=5e-2)
    t.train_step()
    row = t.train_step()
    ratios = []
    for logp, b, m in seen[-4:]:
        z = (logp - b).double().numpy()
        mm = m.bool().numpy()
        for i in range(z.shape[0]):
            if loss_type == "gspo":
                if mm[i].any():
                    ratios += [math.exp(z[i][mm[i]].mean())] * int(mm[i].sum())
            else:
                ratios += [math.exp(v) for v in z[i][mm[i]]]
    ratios = np.array(ratios)
    assert ratios.std() > 1e-4  # the stale minibatches really are off-policy
    for q in (0.01, 0.5, 0.99):
        key = f"ratio/q{round(q * 100):02d}"
        assert math.isclose(row[key], float(np.quantile(ratios, q)), rel_tol=1e-6), key  # float32 log-probs


def test_signal_split_reaches_the_row_as_the_minibatch_mean(tmp_path, monkeypatch):
    """Catches: a split key missing from the averaged list (silently dropped) or taken from one minibatch."""
    import sapo_lab.training.update as update_mod

    stats = []
    real = update_mod.policy_loss

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        stats.append(out.stats)
        return out

    monkeypatch.setattr(update_mod, "policy_loss", spy)
    t = _trainer(tmp_path, loss_type="grpo", steps_per_generation=4, learning_rate=5e-2)
    t.train_step()
    row = t.train_step()
    for key in ("signal_removed_frac_pos", "signal_share_neg_above", "signal_removed_frac_neg_below", "clip_frac"):
        vals = [s[key] for s in stats[-4:] if math.isfinite(s[key])]
        assert vals, key
        assert math.isclose(row[f"losses/{key}"], sum(vals) / len(vals), rel_tol=1e-12), key


def test_step_diagnostics_in_the_row_match_the_rollout(tmp_path):
    """Catches: advantage sign counts or the truncated fraction computed from the wrong tensor."""
    t = _trainer(tmp_path)
    row = t.train_step()
    n = 4 * 4  # prompts_per_rollout * num_generations in the micro config
    assert row["rollout/adv_pos"] + row["rollout/adv_neg"] + row["rollout/adv_zero"] == n
    assert 0.0 <= row["rollout/truncated_frac"] <= 1.0
    assert row["rollout/zero_advantage_group_frac"] == row["rollout/zero_advantage_groups"] / 4
