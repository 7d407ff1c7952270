"""Where a run lands, said before it works: ``device auto`` without a GPU names the CPU and the run's cost
there on the first line, a named device says nothing, and a slow cold start reports its pace early."""

import pytest
import torch
from _micro import micro

from sapo_lab.cli import main
from sapo_lab.runs.config import PRESETS, load_config
from sapo_lab.runs.metric_names import DEV_PASS1, REWARD_MEAN
from sapo_lab.tasks import splits_for, task_for
from sapo_lab.training import console
from sapo_lab.training import device as device_module
from sapo_lab.training import trainer as trainer_module
from sapo_lab.training.cold_start import train_cold_start
from sapo_lab.training.console import PaceReport, ProgressBar
from sapo_lab.training.device import PlannedWork, cpu_fallback_notice, matmul_parameters, planned_work, say_once
from sapo_lab.training.model import MODEL_SIZES, build_model, load_model_and_tokenizer
from sapo_lab.training.trainer import Trainer


@pytest.fixture
def no_gpu(monkeypatch):
    """No CUDA, and nothing said yet in this process (another test may have said the same line)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_module, "_SAID", set())


def _lines_of_a_new_trainer(tmp_path, cfg) -> list[str]:
    said = []
    Trainer(cfg, str(tmp_path / "run"), log=said.append, progress=False)
    return said


def test_auto_without_a_gpu_says_so_first_with_the_cold_start_count(no_gpu, tmp_path):
    # catches the silent fallback, and a count read from another key than cold_start.max_updates
    said = _lines_of_a_new_trainer(tmp_path, load_config("micro"))
    updates = PRESETS["micro"]["cold_start"]["max_updates"]
    assert said and said[0].startswith("note: no GPU found: device auto chose the CPU"), said
    assert f"a cold start of up to {updates} updates" in said[0] and "GFLOP/s" in said[0]


def test_a_named_cpu_proceeds_without_the_notice(no_gpu, tmp_path):
    # catches the notice keyed on the device found rather than on the fallback the user did not choose
    assert not any("GPU" in line for line in _lines_of_a_new_trainer(tmp_path, load_config("micro", {"device": "cpu"})))


def test_the_command_line_prints_the_notice_as_its_first_line(no_gpu, tmp_path, monkeypatch, capsys):
    # catches the line said after the model loads or the cold start begins (the preset's silent minutes)
    monkeypatch.setattr(trainer_module.Trainer, "train", lambda self: {"status": "interrupted"})
    assert main(["train", "--config", "micro", "--output-dir", str(tmp_path / "run")]) == 130
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("note: no GPU found: device auto chose the CPU")


def test_a_long_run_is_a_warning_that_says_how_to_shorten_it():
    # catches a 20,000-update cold start announced in the same quiet tone as a two-second run
    long = PlannedWork(10**8, 768, 20000, 1e12, 500, 1e18)
    short = PlannedWork(10**4, 32, 4, 1e6, 3, 1e9)
    cpu = torch.device("cpu")
    assert cpu_fallback_notice("auto", cpu, long).startswith("warning: no GPU found")
    assert "a warning because it may take over 10 min: --cold_start.max_updates N and --max_steps N" in \
        cpu_fallback_notice("auto", cpu, long)
    assert cpu_fallback_notice("auto", cpu, short).startswith("note: no GPU found")  # the same words, no alarm
    assert cpu_fallback_notice("auto", torch.device("cuda"), long) is None
    assert cpu_fallback_notice("cpu", cpu, long) is None


def test_a_cached_cold_start_costs_no_updates():
    # catches an estimate that charges a cold start the cache will skip
    cfg = micro()
    task = task_for(cfg)
    work = planned_work(cfg, task, splits_for(cfg, task), cold_start_cached=True, resume=False)
    assert work.cold_start_updates == 0
    assert "no cold start to train" in cpu_fallback_notice("auto", torch.device("cpu"), work)


def test_the_weights_counted_are_the_models_matrices():
    # counted here from a built GPT-2's own 2-D weights (blocks and output head): catches a layer's 12 d^2
    # written as 8 d^2 (the MLP's factor 4 forgotten) or the output head left out
    vocab = 23
    model = build_model("cpu-tiny", vocab_size=vocab)
    blocks = sum(p.numel() for n, p in model.transformer.h.named_parameters() if p.dim() == 2)
    assert matmul_parameters(MODEL_SIZES["cpu-tiny"], vocab) == blocks + model.lm_head.weight.numel()


def test_the_same_line_is_said_once_a_process(monkeypatch):
    # catches a study of many runs repeating the notice before each of them
    monkeypatch.setattr(device_module, "_SAID", set())
    said = []
    for line in ("a", "a", "b"):
        say_once(said.append, line)
    assert said == ["a", "b"]


def test_the_cold_start_reports_from_its_first_update(tmp_path):
    # catches progress tied to the dev checks (every 100 updates in the GPU preset): the first report must
    # come after update 1, before the first dev check's line
    cfg = micro(**{"cold_start.eval_every": 2})
    task = task_for(cfg)
    model, tok = load_model_and_tokenizer(cfg.model.name_or_path, seed=0, alphabet=task.alphabet)
    events = []
    train_cold_start(model, tok, splits_for(cfg, task), cfg, torch.device("cpu"), task=task,
                     log=lambda line: events.append(line), progress=lambda n, loss: events.append(n))
    updates = [e for e in events if isinstance(e, int)]
    assert updates == list(range(1, cfg.cold_start.max_updates + 1))
    first_check = next(i for i, e in enumerate(events) if isinstance(e, str) and "sft loss" in e)
    assert events.index(1) < first_check


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_pace_is_shown_after_a_slow_first_update_and_then_every_interval():
    # by hand: 5 s an update, 100 updates, so 99 x 5 = 495 s (8 min) left after the first; catches a report
    # that waits for a fixed count of updates, or repeats itself faster than its interval
    clock, said = _Clock(), []
    pace = PaceReport(said.append, total=100, what="cold start: update", every_s=10.0, clock=clock)
    for n in range(1, 4):
        clock.now += 5.0
        pace(n, torch.tensor(2.5))
    assert said[0] == "cold start: update 1 of up to 100, loss 2.500, 5 s elapsed, 5.00 s each, up to 8 min left"
    assert len(said) == 2 and said[1].startswith("cold start: update 3 of up to 100")  # 15 s: one interval on


def test_a_quick_loop_reports_nothing():
    # catches the micro preset's second-long cold start printing a line per update
    clock, said = _Clock(), []
    pace = PaceReport(said.append, total=4, what="update", every_s=10.0, clock=clock)
    for n in range(1, 5):
        clock.now += 0.1
        pace(n)
    assert said == []



def test_the_cold_start_is_charged_as_an_upper_bound_and_the_rest_as_a_lower_one(monkeypatch):
    # At a fixed 1 GFLOP/s: 60 s of rollout steps and evaluations (certain) and 900 s of cold start that may stop
    # early. Catches the whole 960 s announced as "at least 16 min" (a cold start stopped at its target after a
    # fraction of its updates made that a promise the run broke), and the warning judged on the certain part only.
    monkeypatch.setattr(device_module, "cpu_flops_per_second", lambda width: 1e9)
    work = PlannedWork(10**4, 32, 3000, 3e8, 20, 960e9, cold_start_flops=900e9)
    line = cpu_fallback_notice("auto", torch.device("cpu"), work)
    assert "at least 60 s for the rollout steps and evaluations" in line
    assert "plus up to 15 min for the cold start" in line
    assert line.startswith("warning: no GPU found") and "may take over 10 min" in line


def test_rollout_steps_report_their_pace_where_no_bar_is_drawn():
    # by hand: 20 steps of 5 s; after step 1, 19 x 5 = 95 s (2 min) left; the next line one interval on, at step 3.
    # Catches RL steps that print nothing between the cold start and the table, a line per step, and a count
    # that says "up to" for a loop that runs all its steps
    clock, said = _Clock(), []
    bar = ProgressBar(total=20, initial=0, desc="sapo", enabled=False, log=said.append, clock=clock)
    for reward in (0.25, 0.5, 0.75):
        clock.now += 5.0
        bar.show({REWARD_MEAN: reward, DEV_PASS1: None})
    bar.close()
    assert said == ["rollout step 1 of 20, reward 0.250, 5 s elapsed, 5.00 s each, about 2 min left",
                    "rollout step 3 of 20, reward 0.750, 15 s elapsed, 5.00 s each, about 85 s left"]


def test_a_resumed_run_counts_its_pace_from_where_it_resumed():
    # resumed at step 10 of 20, 5 s a step: 9 x 5 = 45 s left after step 11. Catches the pace divided by all
    # 11 steps (0.45 s each) when only one ran in this process
    clock, said = _Clock(), []
    bar = ProgressBar(total=20, initial=10, desc="sapo", enabled=False, log=said.append, clock=clock)
    clock.now += 5.0
    bar.show({REWARD_MEAN: 0.5, DEV_PASS1: None})
    bar.close()
    assert said == ["rollout step 11 of 20, reward 0.500, 5 s elapsed, 5.00 s each, about 45 s left"]


def test_the_trainer_gives_its_log_to_the_progress_lines(no_gpu, tmp_path, monkeypatch):
    # the loop with its model work replaced (three steps of a fixed reward) and every step shown: catches the
    # trainer building its bar without its log, so that a run without a terminal prints nothing while it trains
    monkeypatch.setattr(console, "PACE_EVERY_S", 0.0)
    said = []
    trainer = Trainer(load_config("micro", {"device": "cpu"}), str(tmp_path / "run"), log=said.append, progress=False)

    def fake_step():
        trainer.step += 1
        return {REWARD_MEAN: 0.5, DEV_PASS1: None}

    monkeypatch.setattr(trainer, "start", lambda: setattr(trainer, "step", 0))
    monkeypatch.setattr(trainer, "train_step", fake_step)
    monkeypatch.setattr(trainer, "_dev_eval_if_due", lambda row: None)
    monkeypatch.setattr(type(trainer.folder), "append_metrics", lambda folder, row: None)
    monkeypatch.setattr(trainer, "_checkpoint", lambda: None)
    monkeypatch.setattr(trainer, "_end", lambda status: {"status": status})
    assert trainer.train() == {"status": "completed"}
    steps = [line.split(",")[0] for line in said if line.startswith("rollout step")]
    assert steps == ["rollout step 1 of 3", "rollout step 2 of 3", "rollout step 3 of 3"], said
