"""What one minibatch update minimizes, checked by value: the configured token aggregation with the
zero-advantage rows skipped (beta = 0), and the KL term over every response when beta > 0. These are the
mutations earlier tests caught only by side effect.

Mutations of sapo_lab/training/ tried one at a time, and the test that fails for each:

test_minimized_loss_uses_the_configured_aggregation
    the aggregation hard-coded in LossConfig.policy_loss_kwargs (either value);
    the zero-advantage rescaling with a hard-coded aggregation (either value); the rescaling left out
test_zero_advantage_responses_still_get_the_kl_term
    zero-advantage responses skipped although beta > 0 (the KL term loses them);
    the KL term's aggregation hard-coded
"""

import pytest
from _micro import QUIET, micro, parity_reward

import sapo_lab.training.trainer  # noqa: F401  binds every function a spy replaces
from sapo_lab.objective.losses import kl_to_reference, policy_loss
from sapo_lab.training.metrics import metrics_row
from sapo_lab.training.rollout import RolloutBatch
from sapo_lab.training.trainer import train

BASE = {"device": "cpu", "cold_start.max_updates": 0, "gradient_comparison_every": 0, "max_steps": 1,
        "steps_per_generation": 2}


def _record_minibatches(monkeypatch):
    """The full minibatches (every response, zero advantages included) each rollout is split into."""
    seen, real = [], RolloutBatch.minibatches

    def minibatches(self, *args, **kwargs):
        seen.append(real(self, *args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(RolloutBatch, "minibatches", minibatches)
    return seen


@pytest.mark.parametrize("aggregation", ["per_response", "token_pool"])
def test_minimized_loss_uses_the_configured_aggregation(tmp_path, monkeypatch, spy, aggregation):
    """The first minibatch is on-policy (r = 1), where GRPO's token loss is -A: the minimized loss must be
    the configured average of -A over the full minibatch, zero-advantage responses counted although they
    are skipped (per_response: the mean over responses; token_pool: the mean over tokens).

    Catches a hard-coded aggregation in the loss or in the skipped rows' rescaling, and no rescaling."""
    minibatches = _record_minibatches(monkeypatch)
    built = spy(metrics_row)
    cfg = micro(**BASE, loss_type="grpo", aggregation=aggregation, skip_zero_advantage=True)
    train(cfg, str(tmp_path / "run"), reward_fn=parity_reward, **QUIET)

    mb = minibatches[0][0]
    lengths, adv = mb.completion_mask.sum(-1).double(), mb.advantages.double()
    per_response, token_pool = float(-adv.mean()), float(-(adv * lengths).sum() / lengths.sum())
    kept = adv != 0
    # The minibatch has skipped rows, and the two aggregations (and rescalings) give different numbers here.
    assert 0 < int(kept.sum()) < len(adv)
    assert abs(per_response - token_pool) > 1e-3
    assert abs(float(kept.double().mean()) - float(lengths[kept].sum() / lengths.sum())) > 1e-2
    minimized = built[0].args[2][0].loss  # the first update's loss, as the row builder gets it
    expected = per_response if aggregation == "per_response" else token_pool
    assert minimized == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("reward", ["all zero", "parity"])
def test_zero_advantage_responses_still_get_the_kl_term(tmp_path, monkeypatch, spy, reward):
    """With beta > 0 every response goes through the forward, because the KL term to the reference sees
    it even when its advantage is 0 (skip_zero_advantage only applies at beta = 0); the KL term uses the
    configured aggregation.

    Catches skipping zero-advantage responses regardless of beta (no KL term at all when every advantage
    is 0), and a hard-coded KL aggregation."""
    minibatches = _record_minibatches(monkeypatch)
    kls, losses, built = spy(kl_to_reference), spy(policy_loss), spy(metrics_row)
    reward_fn = parity_reward if reward == "parity" else (lambda text, finished, problem: (0.0, "wrong"))
    cfg = micro(**BASE, beta=0.1, skip_zero_advantage=True, aggregation="token_pool")
    train(cfg, str(tmp_path / "run"), reward_fn=reward_fn, **QUIET)

    full = minibatches[0]
    assert any(bool((mb.advantages == 0).any()) for mb in full)  # there are zero-advantage responses to keep
    assert [c.args[0].shape[0] for c in kls] == [len(mb.advantages) for mb in full]
    assert [c.args[2].shape[0] for c in losses] == [len(mb.advantages) for mb in full]
    assert all(c.kwargs["aggregation"] == "token_pool" for c in kls)
    row = built[0].result
    assert row["losses/kl_ref"] is not None and row["optim/tokens_trained"] == row["rollout/tokens_generated"]
