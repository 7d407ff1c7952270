"""How the K minibatch updates of a rollout step become its one ``metrics.jsonl`` row: each per-minibatch
quantity is recorded where it is made (the gradient norm at ``optimizer.step()``, the KL and the loss
statistics as the loss functions return them), and the row must combine them as metrics.py documents:
the mean over the step's minibatches, ``*_max`` the maximum, ``*_last_minibatch`` the last one.

Mutations of sapo_lab/training/ tried one at a time, and the test that fails for each:

test_row_combines_the_minibatches_as_documented
    grad_norm of the last minibatch instead of the mean; grad_norm_max as the mean;
    kl_ref of the first minibatch; the averaged loss statistics (clip_frac, approx_kl, ...) of the
    last minibatch; the loss summed over minibatches; kl_ref logged as beta * KL;
    max_abs_log_ratio as the mean; ratio_q95_last_minibatch from the first minibatch;
    the trainer changing a value of the row after the metrics builder returned it
"""

import json

import pytest
from _micro import QUIET, metrics_rows, micro, parity_reward

import sapo_lab.training.trainer  # noqa: F401  binds every function a spy replaces
from sapo_lab.objective.losses import kl_to_reference, policy_loss
from sapo_lab.training.metrics import metrics_row
from sapo_lab.training.trainer import train

K, STEPS, BETA = 4, 2, 0.1


def _mean(values):
    return sum(values) / len(values)


def test_row_combines_the_minibatches_as_documented(tmp_path, spy, optimizer_steps):
    """The row of each step holds the mean over its K minibatches of the gradient norm before clipping
    (clipping off, so the optimizer sees it), the KL to the reference, the minimized loss and each loss
    statistic; the maximum for ``grad_norm_max`` and ``max_abs_log_ratio``; and it is written as built."""
    losses, kls = spy(policy_loss), spy(kl_to_reference)
    built = []  # each row as the builder returned it, copied before the trainer holds it
    spy(metrics_row, on_call=lambda call: built.append(json.loads(json.dumps(call.result))))
    # No cold start (its AdamW steps would mix in); GRPO with a narrow clip so clip_frac varies; a KL term.
    cfg = micro(**{"device": "cpu", "cold_start.max_updates": 0, "gradient_comparison_every": 0, "loss_type": "grpo",
                   "epsilon": 0.02, "beta": BETA, "max_grad_norm": 0.0, "steps_per_generation": K, "max_steps": STEPS})
    train(cfg, str(tmp_path / "run"), reward_fn=parity_reward, **QUIET)
    written = metrics_rows(str(tmp_path / "run"))
    assert len(losses) == len(kls) == len(optimizer_steps) == K * STEPS and len(built) == STEPS

    varied = set()
    for i, row in enumerate(written):
        mbs = slice(i * K, (i + 1) * K)
        norms = [s.grad_norm for s in optimizer_steps[mbs]]
        kl = [float(c.result.detach()) for c in kls[mbs]]
        stats = [c.result.stats for c in losses[mbs]]
        minimized = [float(c.result.loss.detach()) + BETA * k for c, k in zip(losses[mbs], kl, strict=True)]
        assert row["optim/grad_norm"] == pytest.approx(_mean(norms), rel=1e-5)
        assert row["optim/grad_norm_max"] == pytest.approx(max(norms), rel=1e-5)
        assert row["losses/kl_ref"] == pytest.approx(_mean(kl), rel=1e-9)
        assert row["losses/loss"] == pytest.approx(_mean(minimized), rel=1e-6, abs=1e-9)
        for key in ("clip_frac", "approx_kl", "coef_q50", "signal_removed_frac"):
            assert row[f"losses/{key}"] == pytest.approx(_mean([s[key] for s in stats]), rel=1e-9), key
        assert row["ratio/max_abs_log_ratio"] == pytest.approx(max(s["max_abs_log_ratio"] for s in stats), rel=1e-9)
        assert row["ratio/q95_last_minibatch"] == pytest.approx(stats[-1]["ratio_q95"], rel=1e-9)
        as_built = {k: v for k, v in built[i].items() if k != "time/elapsed_s"}  # a dev step adds its time
        assert {k: row[k] for k in as_built} == as_built
        varied |= {name for name, values in (("grad_norm", norms), ("kl", kl), ("clip_frac", [s["clip_frac"] for s in
                   stats]), ("ratio_q95", [s["ratio_q95"] for s in stats])) if len(set(values)) > 1}
    # The minibatches differ in each quantity, so a first, last or sum in place of the mean is seen.
    assert varied == {"grad_norm", "kl", "clip_frac", "ratio_q95"}
