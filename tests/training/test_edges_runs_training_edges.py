"""Edges of the training loop's small rules, each against a value worked out here: the held-out temperature
when eval_temperature is 0, the normal interval's sample variance, the run's planned FLOPs (which split the
cold start's dev checks sample, what a resumed run is charged), the time limit reached exactly, and the cold
start's last update off its eval_every cadence. No rollout step is trained."""

import math
from types import SimpleNamespace

import pytest
import torch

from sapo_lab.runs.config import load_config
from sapo_lab.tasks import splits_for, task_for
from sapo_lab.tasks.addition import make_problem
from sapo_lab.training import cold_start, device
from sapo_lab.training.device import planned_work
from sapo_lab.training.evaluation import eval_temperature, mean_ci
from sapo_lab.training.model import build_model
from sapo_lab.training.tokenizer import build_char_tokenizer
from sapo_lab.training.trainer import Trainer


@pytest.mark.parametrize(("typed", "used"), [(0, 0.0), (0.6, 0.6), (None, 1.3)])
def test_an_eval_temperature_of_zero_is_kept(typed, used):
    """Catches ``e or rollout temperature``: greedy held-out scoring (0) silently sampled at the rollout's 1.3."""
    cfg = load_config("micro", {"temperature": 1.3, "eval_temperature": typed})
    assert eval_temperature(cfg) == used


def test_the_interval_uses_the_sample_variance():
    """By hand: mean 0.5, squared deviations 0.0625 + 0.0625 + 0 + 0 = 0.125, over m - 1 = 3 gives 1/24, over
    m = 4 gives 1/32; half width 1.96 sqrt(1/96) = 0.20004. Catches the variance divided by m (0.1732)."""
    mean, low, high = mean_ci([0.25, 0.75, 0.5, 0.5])
    half = 1.96 * math.sqrt(0.125 / 3 / 4)
    assert mean == 0.5 and low == pytest.approx(0.5 - half, abs=1e-12) and high == pytest.approx(0.5 + half, abs=1e-12)
    assert round(half, 5) == 0.20004


def _planned(cached: bool, resume: bool):
    cfg = load_config("micro", {"cold_start.max_updates": 6, "cold_start.eval_every": 2, "max_steps": 3})
    # every prompt "12+34=" has 6 characters and every answer 3: an SFT row is 6 + 3 + EOS = 10 tokens, and a
    # sampled one 6 + max_completion_length 4 = 10. Dev and eval get different sizes (5 and 7).
    problem = make_problem(12, 34, 2)
    splits = {"train": [problem] * 2, "dev": [problem] * 5, "eval": [problem] * 7}
    return planned_work(cfg, task_for(cfg), splits, cold_start_cached=cached, resume=resume)


# cpu-micro: d = 32, one layer, vocabulary of the 12 addition characters + 3 specials: 12 x 32^2 + 32 x 15
PARAMS = 12 * 32 * 32 + 32 * 15
COLD = 6 * 16 * 10 * 6 + (6 // 2) * 5 * 10 * 2  # 6 updates of 16 rows x 10 tokens x 6; 3 dev checks of 5 prompts
ROLLOUT = 3 * 4 * 4 * 10 * 10  # 3 steps x 4 prompts x G 4 x 10 tokens x (sample, rescore, train)
EVAL = 2 * 7 * 2 * 10 * 2  # two held-out evaluations x 7 prompts x 2 samples x 10 tokens x 2


@pytest.mark.parametrize(("cached", "resume", "updates", "flops"), [
    (False, False, 6, PARAMS * (COLD + ROLLOUT + EVAL)),
    (True, False, 0, PARAMS * (ROLLOUT + EVAL)),
    (False, True, 0, PARAMS * ROLLOUT),
])
def test_the_planned_work_counts_each_phase_on_its_own_split(cached, resume, updates, flops):
    """Catches the cold start's dev checks costed on the eval split, a resumed run charged its cold start again
    (``cached and resume``) or its two held-out evaluations, and a weight count off the 12 d^2 a layer."""
    work = _planned(cached, resume)
    assert work.matmul_parameters == PARAMS == 12768
    assert work.cold_start_updates == updates
    assert work.flops == flops
    assert work.cold_start_flops == (PARAMS * COLD if updates else 0)


@pytest.mark.parametrize(("limit", "elapsed", "status"), [(5.0, 4.5, None), (5.0, 5.0, "time_limit"),
                                                           (5.0, 5.5, "time_limit"), (0.0, 1e6, None)])
def test_the_time_limit_is_reached_at_its_value(limit, elapsed, status):
    """Catches ``>`` for ``>=`` (a run whose clock reads exactly max_train_time_s goes on), and 0 read as a limit
    of zero seconds instead of none."""
    trainer = SimpleNamespace(stop_requested=False, elapsed=elapsed, cfg=SimpleNamespace(max_train_time_s=limit))
    assert Trainer._stop_status(trainer) == status


@pytest.mark.parametrize(("target", "updates", "checked_at"), [(0.75, 3, [2, 3]), (0.5, 2, [2])])
def test_the_cold_start_checks_its_last_update_and_stops_at_its_target(monkeypatch, target, updates, checked_at):
    """Three updates checked every two: dev is measured after update 2 and after the last, update 3, though 3 is
    off the cadence; a dev Pass@1 of exactly the target (0.5) stops it at the first check. Catches the last
    update left unmeasured and ``>`` for ``>=`` at the target."""
    checked = []

    def fixed_score(*args, seed, **kwargs):
        checked.append(seed)
        return {"pass1": 0.5}

    monkeypatch.setattr(cold_start, "evaluate", fixed_score)
    monkeypatch.setattr(cold_start, "cold_start_dev_eval_seed", lambda step: step)  # the seed names the update
    cfg = load_config("micro", {"cold_start.max_updates": 3, "cold_start.eval_every": 2, "target_pass1": target})
    task = task_for(cfg)
    tok = build_char_tokenizer(task.alphabet)
    model = build_model("cpu-micro", vocab_size=len(tok), seed=0)
    splits = task.make_splits(seed=0, num_train=40, num_dev=4, num_eval=2)
    said = []
    report = cold_start.train_cold_start(model, tok, splits, cfg, torch.device("cpu"), log=said.append, task=task)
    assert report["updates"] == updates and checked == checked_at and report["dev_pass1"] == 0.5
    # micro's batch is 16 examples, distinct from the cadence 2: catches one said for the other
    assert said[0] == f"cold start: up to 3 updates of 16 examples, to dev pass@1 {target} (checked every 2)"


@pytest.mark.parametrize(("resume", "plan"), [
    (True, "this run: 3 rollout steps (no cold start to train), "),
    (False, "this run: a cold start of up to 4 updates ("),
])
def test_the_cpu_notice_of_a_resumed_run_charges_no_cold_start(monkeypatch, resume, plan):
    """Catches the trainer costing a resumed run as a fresh one (its cold start, read from the run folder,
    charged again): the notice is built from the trainer's own resume flag."""
    monkeypatch.setattr(device, "_SAID", set())  # the notice is said once a process
    cfg = load_config("micro")
    task = task_for(cfg)
    said = []
    trainer = SimpleNamespace(cfg=cfg, device=torch.device("cpu"), task=task, splits=splits_for(cfg, task),
                              resume=resume, log=said.append)
    Trainer._say_where_it_runs(trainer)
    assert len(said) == 1 and said[0].startswith("note: no GPU found: device auto chose the CPU; ") and plan in said[0]
