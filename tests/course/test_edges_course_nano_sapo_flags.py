"""nano_sapo's command line, warm start and learning-rate warm-up at their edges, with the model, the data and
the training step replaced by stand-ins that record what reaches them (nothing trains): --steps 0 allowed and -1
refused, each flag reaching its setting, the warm start stopping on its target exactly and looking every 25
updates, and the warm-up's first step at lr / warmup, not 0."""

from __future__ import annotations

import pytest
import torch

from sapo_lab.course import nano_sapo


@pytest.fixture
def recorded_train(monkeypatch):
    calls = []
    monkeypatch.setattr(nano_sapo, "train", lambda settings, loss_fn: calls.append((settings, loss_fn)))
    return calls


def test_each_flag_reaches_its_setting(recorded_train):
    """catches: --seed or --steps not reaching Settings (distinct values 3 and 5, neither a default), or
    --loss grpo still training with SAPO's loss."""
    nano_sapo.main(["--loss", "grpo", "--steps", "3", "--seed", "5"])
    (settings, loss_fn), = recorded_train
    assert (settings.steps, settings.seed, loss_fn) == (3, 5, nano_sapo.grpo_loss)
    assert (settings.tau_pos, settings.tau_neg) == (1.0, 1.05)  # the defaults the help states


def test_zero_steps_is_allowed_and_a_negative_count_is_refused_in_one_line(recorded_train, capsys):
    """catches: the bound on --steps made strict (0, a warm start alone, refused)."""
    nano_sapo.main(["--steps", "0"])
    assert recorded_train[0][0].steps == 0 and recorded_train[0][1] is nano_sapo.sapo_loss
    with pytest.raises(SystemExit) as stop:
        nano_sapo.main(["--steps", "-1"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("error: --steps must be >= 0, got -1")


class Problem:
    prompt, answer = "1+2=", "300"


def linear_model():
    torch.manual_seed(0)
    return torch.nn.Linear(1, 1)


def test_the_warm_start_stops_when_dev_pass_at_1_reaches_its_target_exactly(monkeypatch):
    """catches: the target compared with > (a score exactly on it does not stop the warm start), or the dev
    score looked at every 50 updates instead of 25. The score is 0.25, the target 0.25: one look, at update 25."""
    model = linear_model()
    monkeypatch.setattr(nano_sapo, "token_logprobs", lambda m, ids, att, n: m.weight.sum() * torch.ones(1, n))
    monkeypatch.setattr(nano_sapo, "pass_at_1", lambda m, problems, max_len: 0.25)
    lines = []
    settings = nano_sapo.Settings(warm_updates=100, warm_target=0.25)
    nano_sapo.warm_start(model, {"train": [Problem()] * 64, "dev": [Problem()]}, settings, 4, lines.append)
    assert len(lines) == 1 and lines[0].startswith("warm start   25  loss ")
    assert lines[0].endswith("dev Pass@1 0.250")


def test_the_learning_rate_warms_up_from_lr_over_warmup(monkeypatch):
    """catches: the warm-up's first step at 0 (n / warmup for (n + 1) / warmup). With lr 0.5 and 4 warm-up
    steps the steps run at 0.5 * 1/4, 2/4, 3/4, 4/4, then 0.5; a dev line at every 2nd step and the last."""
    monkeypatch.setattr(nano_sapo, "make_splits", lambda **kw: {"train": [Problem()] * 4, "dev": [Problem()],
                                                                "eval": [Problem()]})
    monkeypatch.setattr(nano_sapo, "build_model", lambda name, seed: linear_model())
    monkeypatch.setattr(nano_sapo, "warm_start", lambda *a: None)
    monkeypatch.setattr(nano_sapo, "pass_at_1", lambda m, problems, max_len: 0.5)
    rates = []

    def step(model, opt, schedule, problems, s, loss_fn, max_len):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
        return 0.5, 0.125

    monkeypatch.setattr(nano_sapo, "rl_step", step)
    lines = []
    nano_sapo.train(nano_sapo.Settings(steps=5, lr=0.5, warmup=4, prompts=2, eval_every=2), log=lines.append)
    assert rates == pytest.approx([0.125, 0.25, 0.375, 0.5, 0.5], rel=1e-12)
    steps = [line for line in lines if line.startswith("step")]
    assert ["dev Pass@1" in line for line in steps] == [False, True, False, True, True]
