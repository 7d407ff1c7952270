"""The optimizer side of the update, observed where it acts: at each ``optimizer.step()`` (torch's global
step hook, the ``optimizer_steps`` fixture), not in the trainer's own bookkeeping.

Mutations of sapo_lab/training/ tried one at a time, and the test that fails for each:

test_learning_rate_at_each_optimizer_step_follows_the_schedule
    a schedule as long as max_steps instead of max_steps * steps_per_generation optimizer steps;
    the schedule indexed by the rollout step instead of the optimizer step;
    the peak learning_rate set on the optimizer instead of the scheduled one;
    the scheduled LR set after optimizer.step() (applied one step late); the row's lr logged as the peak
test_clipping_uses_the_configured_threshold_before_the_step
    gradients clipped after optimizer.step(); the threshold hard-coded to 1.0; no clipping;
    max_grad_norm = 0 passed to the clip as is (clips to zero instead of "off");
    the logged grad_norm measured after clipping
test_adamw_settings_from_the_config_reach_the_optimizer
    AdamW built without betas, or without weight_decay; adam_beta1 / adam_beta2 swapped;
    torch.optim.Adam (L2 penalty, not decoupled decay) instead of AdamW;
    the optimizer given only part of the model's parameters; a new optimizer every rollout step (moments reset)
"""

import math

import pytest
import torch
from _micro import QUIET, metrics_rows, micro, parity_reward

from sapo_lab.training.model import count_parameters, load_model_and_tokenizer
from sapo_lab.training.trainer import train

# No cold start (its own AdamW would step too) and no gradient comparison: every optimizer step
# the hook sees is one of the run's minibatch updates. Every response is trained.
BASE = {
    "device": "cpu",
    "cold_start.max_updates": 0,
    "evaluation.gradient_comparison_every": 0,
    "optimization.skip_zero_advantage": False,
}


def _run(tmp_path, **overrides):
    cfg = micro(**{**BASE, **overrides})
    run_dir = str(tmp_path / "run")
    train(cfg, run_dir, reward_fn=parity_reward, **QUIET)
    return metrics_rows(run_dir)


# The LR, as a fraction of the peak, at optimizer steps 0..5 of a run of 3 rollout steps x 2 minibatches
# with 2 warmup steps: the warmup climbs (i + 1) / 2, then the decay spans the 4 optimizer steps left.
SCHEDULES = {
    "linear": [0.5, 1.0, 1.0, 0.75, 0.5, 0.25],
    "cosine": [0.5, 1.0, 1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5, (1 + math.cos(3 * math.pi / 4)) / 2],
    "constant_with_warmup": [0.5, 1.0, 1.0, 1.0, 1.0, 1.0],
    "constant": [1.0] * 6,  # no warmup either
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_learning_rate_at_each_optimizer_step_follows_the_schedule(tmp_path, optimizer_steps, schedule):
    """The LR the optimizer holds when it steps is the scheduled one, over the real number of optimizer
    steps; each row logs the LR of its rollout step's last update.

    Catches: a schedule as long as the rollout steps (too short: it would decay to 0 by step 3), indexed by
    the rollout step, the peak LR applied, the LR set after the step, the peak logged."""
    peak = 1e-2
    rows = _run(tmp_path, max_steps=3, steps_per_generation=2, warmup_steps=2, learning_rate=peak,
                lr_scheduler_type=schedule)
    applied = [s.groups[0]["lr"] for s in optimizer_steps]
    assert applied == pytest.approx([peak * f for f in SCHEDULES[schedule]], rel=1e-12)
    assert [r["optim/lr"] for r in rows] == applied[1::2]


@pytest.mark.parametrize("threshold", [1e-3, 0.0, 1e3])
def test_clipping_uses_the_configured_threshold_before_the_step(tmp_path, optimizer_steps, threshold):
    """The optimizer steps with gradients of norm min(norm, max_grad_norm) (0 = no clipping), and the row
    logs the norm before clipping (mean and max over the step's minibatches).

    Catches: clipping after the step, a hard-coded threshold, no clipping, 0 read as a threshold, the
    logged norm taken after clipping."""
    rows = _run(tmp_path, max_steps=2, steps_per_generation=2, max_grad_norm=threshold)
    seen = [s.grad_norm for s in optimizer_steps]
    assert len(seen) == 4
    for i, row in enumerate(rows):
        pre_clip_max = row["optim/grad_norm_max"]
        assert pre_clip_max > 1e-2  # the gradients are far above the small threshold: clipping must act
        if threshold == 1e-3:
            assert seen[2 * i : 2 * i + 2] == pytest.approx([threshold] * 2, rel=1e-4)
        else:  # off, or a threshold no gradient reaches: the optimizer sees the logged norms themselves
            assert max(seen[2 * i : 2 * i + 2]) == pytest.approx(pre_clip_max, rel=1e-5)
            assert sum(seen[2 * i : 2 * i + 2]) / 2 == pytest.approx(row["optim/grad_norm"], rel=1e-5)


def test_adamw_settings_from_the_config_reach_the_optimizer(tmp_path, optimizer_steps):
    """One AdamW over every model parameter, kept for the whole run, with the configured betas and weight
    decay at every step.

    Catches: betas or weight decay left at torch's defaults (0.9, 0.999) / 0.01, the betas swapped, Adam
    (L2 penalty) instead of AdamW (decoupled decay), part of the parameters, moments reset each step."""
    _run(tmp_path, max_steps=2, steps_per_generation=2, adam_beta1=0.8, adam_beta2=0.95, weight_decay=0.05)
    assert len(optimizer_steps) == 4
    model, _ = load_model_and_tokenizer(str(tmp_path / "run" / "final_model"))
    for s in optimizer_steps:
        assert type(s.optimizer) is torch.optim.AdamW
        (group,) = s.groups
        assert group["betas"] == (0.8, 0.95) and group["weight_decay"] == 0.05
        assert group["eps"] == 1e-8  # not a config key: torch's default, also transformers' adam_epsilon
        assert not group["amsgrad"] and not group["maximize"]
        assert s.num_params == count_parameters(model)
    assert len({id(s.optimizer) for s in optimizer_steps}) == 1
    assert [s.state_steps for s in optimizer_steps] == [0, 1, 2, 3]
