import json
import os

import pytest
import torch
from _micro import QUIET, metrics_rows, micro, parity_reward, torch_coin_reward, untimed_rows

from sapo_lab.training.trainer import TrainingDiverged, learning_rate_at, train


@pytest.mark.parametrize("loss_type", ["sapo", "grpo", "gspo"])
def test_end_to_end_each_loss_type(tmp_path, loss_type):
    run = str(tmp_path / loss_type)
    # No skipping: the micro model's rewards are mostly 0, and the ratio statistics need trained tokens.
    summary = train(micro(loss_type=loss_type, skip_zero_advantage=False), run, **QUIET)
    for key in (
        "cold_start_pass1",
        "cold_start_pass1_ci95",
        "final_pass1",
        "final_pass1_ci95",
        "train_wall_s",
        "loss_type",
        "seed",
        "config",
    ):
        assert key in summary
    assert summary["loss_type"] == loss_type and summary["config"]["loss"]["loss_type"] == loss_type
    on_disk = json.load(open(os.path.join(run, "summary.json")))
    assert on_disk["final_pass1"] == summary["final_pass1"]
    rows = untimed_rows(run)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for key in (
        "rollout/reward_mean",
        "rollout/entropy_mean",
        "losses/approx_kl",
        "ratio/q05",
        "ratio/q95",
        "losses/coef_q50",
        "losses/signal_removed_frac",
        "rollout/zero_advantage_groups",
        "optim/grad_norm",
        "rollout/tokens_generated",
        "optim/tokens_trained",
        "rollout/response_length_mean",
    ):
        assert rows[0].get(key) is not None, key
    assert rows[1]["eval/dev_pass1"] is not None and rows[0]["eval/dev_pass1"] is None
    assert summary["counters"]["optimizer_steps"] == 4 * 4
    assert os.path.isfile(os.path.join(run, "config.json"))
    assert os.path.isfile(os.path.join(run, "final_model", "model.safetensors"))
    if loss_type != "sapo":
        assert "losses/clip_frac" in rows[0]


def test_interrupted_and_resumed_run_reproduces_uninterrupted(tmp_path):
    cfg = micro(save_steps=10)  # only the interruption writes a checkpoint
    # The parity reward makes the policy actually move between steps.
    train(cfg, str(tmp_path / "full"), reward_fn=parity_reward, **QUIET)

    def stop_after_two(trainer, row):
        if row["step"] == 2:
            trainer.request_stop()  # what Ctrl-C does: finish the step, checkpoint, return

    part = str(tmp_path / "part")
    out = train(cfg, part, reward_fn=parity_reward, **QUIET, on_step_end=stop_after_two)
    assert out["status"] == "interrupted" and out["step"] == 2
    assert not os.path.exists(os.path.join(part, "summary.json"))
    resumed = train(cfg, part, resume=True, reward_fn=parity_reward, **QUIET)
    timed = metrics_rows(part)  # the wall clock goes on from the checkpoint's elapsed time
    grown = timed[2]["time/step_s"] + timed[2].get("time/dev_eval_s", 0.0)
    assert timed[2]["time/elapsed_s"] == pytest.approx(timed[1]["time/elapsed_s"] + grown, rel=1e-9)
    rows = untimed_rows(part)
    assert rows == untimed_rows(str(tmp_path / "full"))
    assert all(r["optim/grad_norm"] > 0 for r in rows) and len({r["rollout/entropy_mean"] for r in rows}) == 4
    full = json.load(open(tmp_path / "full" / "summary.json"))
    assert resumed["final_pass1"] == full["final_pass1"] and resumed["final_eval"] == full["final_eval"]


def test_a_reward_drawing_from_torchs_generator_resumes_exactly(tmp_path):
    """A stochastic reward (here: a coin from torch's global generator) is the one user of that generator in
    the loop; the checkpoint's copy of its state makes the resumed run equal the uninterrupted one.
    Catches that state not restored on resume."""
    cfg = micro(save_steps=10)
    train(cfg, str(tmp_path / "full"), reward_fn=torch_coin_reward, **QUIET)
    part = str(tmp_path / "part")
    stop = lambda trainer, row: trainer.request_stop() if row["step"] == 2 else None  # noqa: E731
    assert train(cfg, part, reward_fn=torch_coin_reward, **QUIET, on_step_end=stop)["status"] == "interrupted"
    torch.rand(1000)  # whatever happens in between
    train(cfg, part, resume=True, reward_fn=torch_coin_reward, **QUIET)
    assert untimed_rows(part) == untimed_rows(str(tmp_path / "full"))


def test_existing_run_is_not_overwritten(tmp_path):
    cfg = micro(max_steps=1)
    train(cfg, str(tmp_path), **QUIET)
    with pytest.raises(ValueError, match="already holds a run"):
        train(cfg, str(tmp_path), **QUIET)
    with pytest.raises(ValueError, match="not a run directory"):
        train(cfg, str(tmp_path / "other"), resume=True, **QUIET)


def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    def poison(trainer, row):
        if row["step"] == 2:
            with torch.no_grad():
                next(trainer.model.parameters()).fill_(float("nan"))

    with pytest.raises(TrainingDiverged, match="step 3.*last good checkpoint: .*step-000002"):
        train(micro(), str(tmp_path), **QUIET, on_step_end=poison)
    ckpt = tmp_path / "checkpoints" / "step-000002"
    from safetensors.torch import load_file

    assert all(torch.isfinite(t).all() for t in load_file(str(ckpt / "model.safetensors")).values())
    assert not (tmp_path / "checkpoints" / "step-000003").exists()


def test_kl_to_reference_is_logged_when_beta_is_set(tmp_path):
    train(micro(beta=0.1, max_steps=2), str(tmp_path), **QUIET)
    rows = untimed_rows(str(tmp_path))
    assert all("losses/kl_ref" in r for r in rows) and rows[0]["losses/kl_ref"] >= 0


def test_learning_rate_schedules():
    cfg = micro(learning_rate=1.0, warmup_steps=2, lr_scheduler_type="linear")
    assert [learning_rate_at(s, 6, cfg) for s in range(6)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    cfg = micro(learning_rate=1.0, warmup_steps=0, lr_scheduler_type="cosine")
    assert learning_rate_at(0, 4, cfg) == 1.0 and abs(learning_rate_at(2, 4, cfg) - 0.5) < 1e-12
    assert learning_rate_at(5, 9, micro(learning_rate=1.0, lr_scheduler_type="constant")) == 1.0


def test_nan_loss_stops_the_run(tmp_path, monkeypatch):
    import sapo_lab.training.update as update_mod

    real = update_mod.policy_loss
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        out = real(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] > 8:  # from the third rollout step on (4 minibatches per step)
            out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(update_mod, "policy_loss", flaky)
    with pytest.raises(TrainingDiverged, match="step 3, minibatch 0: loss is nan"):
        train(micro(skip_zero_advantage=False), str(tmp_path), **QUIET)
    assert (tmp_path / "checkpoints" / "step-000002" / "model.safetensors").exists()


def test_time_limit_finishes_the_run_with_a_summary(tmp_path):
    summary = train(micro(max_train_time_s=1e-9), str(tmp_path), **QUIET)
    assert summary["status"] == "time_limit" and summary["steps"] == 1
    assert (tmp_path / "summary.json").exists()


@pytest.mark.parametrize("aggregation", ["per_response", "token_pool"])
def test_skipping_zero_advantage_responses_gives_the_same_update(tmp_path, aggregation):
    from sapo_lab.training.trainer import Trainer

    params = []
    for skip in (True, False):
        t = Trainer(
            micro(skip_zero_advantage=skip, aggregation=aggregation),
            str(tmp_path / str(skip)),
            reward_fn=parity_reward,  # varies within groups: minibatches mix zero and non-zero advantages
            **QUIET,
        ).start()
        # Plain SGD: Adam would blow float noise on gradients that are exactly 0 in theory
        # (e.g. attention key biases) up to full-size steps and hide the comparison.
        t.opt = torch.optim.SGD(t.model.parameters(), lr=1e-2)
        rows = [t.train_step() for _ in range(2)]
        if skip:
            skipped_rows = rows
        params.append([p.detach().clone() for p in t.model.parameters()])
    assert any(r["optim/tokens_trained"] < r["rollout/tokens_generated"] for r in skipped_rows)  # something was skipped
    for a, b in zip(*params, strict=True):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)


def test_constructing_a_trainer_trains_and_evaluates_nothing(tmp_path, monkeypatch):
    """Catches: the lifecycle (cold start, its evaluation, config.json) running inside the constructor again,
    or start() running it twice."""
    import sapo_lab.training.lifecycle as lifecycle_mod
    from sapo_lab.training.trainer import Trainer

    calls = []
    real_cold, real_eval = lifecycle_mod.get_cold_start, lifecycle_mod.held_out_eval
    monkeypatch.setattr(lifecycle_mod, "get_cold_start", lambda *a, **k: calls.append("cold start") or real_cold(*a, **k))
    monkeypatch.setattr(lifecycle_mod, "held_out_eval", lambda *a, **k: calls.append("eval") or real_eval(*a, **k))
    t = Trainer(micro(max_steps=1), str(tmp_path / "run"), **QUIET)
    assert calls == [] and not (tmp_path / "run").exists() and len(t.splits["eval"]) == 16
    assert t.start() is t and t.start() is t
    assert calls == ["cold start", "eval"] and (tmp_path / "run" / "config.json").exists()
    t.train()
    assert calls == ["cold start", "eval", "eval"]  # the final evaluation


def test_gradient_comparison_is_called_by_the_loop_between_the_loss_and_the_step(tmp_path, monkeypatch):
    """Catches: the comparison back inside the optimizer step, run after the backward (the graph is gone and
    .grad is filled), on the wrong steps or minibatch (the first is on-policy: nothing to compare), or its
    result not reaching the row."""
    import sapo_lab.training.trainer as trainer_mod

    events = []  # (function, the Forward it received or returned)

    def traced(name):
        real = getattr(trainer_mod, name)

        def call(*args, **kwargs):
            out = real(*args, **kwargs)
            forward = out if name == "minibatch_forward" else args[2] if name == "optimizer_step" else args[1]
            events.append((name, forward))
            return out

        monkeypatch.setattr(trainer_mod, name, call)

    for name in ("minibatch_forward", "compare_gradients", "optimizer_step"):
        traced(name)
    t = trainer_mod.Trainer(micro(skip_zero_advantage=False, steps_per_generation=2, gradient_comparison_every=2),
                            str(tmp_path), reward_fn=parity_reward, **QUIET)
    t.start()
    rows = []
    for _ in range(4):
        events.clear()
        rows.append(t.train_step())
        names = [n for n, _ in events]
        if t.step % 2:
            assert names == ["minibatch_forward", "optimizer_step"] * 2
        else:  # the last (stalest) minibatch only, on its own forward, before that forward's backward
            assert names == ["minibatch_forward", "optimizer_step", "minibatch_forward", "compare_gradients",
                             "optimizer_step"]
            assert events[2][1] is events[3][1] is events[4][1]
    assert ["tokseq/cos" in r for r in rows] == [False, True, False, True]
    assert all(r["time/diagnostics_s"] > 0 for r in rows[1::2]) and all(r["time/diagnostics_s"] == 0 for r in rows[::2])


def test_the_loop_fits_on_a_screen():
    """Catches: cadence work (dev evaluation, checkpoints, signals, the progress bar) growing back into the loop."""
    import inspect

    from sapo_lab.training.trainer import Trainer

    for method in (Trainer.train, Trainer._loop, Trainer.train_step):
        assert len(inspect.getsource(method).splitlines()) <= 40, method.__name__
