"""Where a run lands, said before it works: ``device auto`` without a GPU names the CPU and the run's cost
there on the first line, a named device says nothing, and a slow cold start reports its pace early."""

import pytest
import torch
from _micro import micro

from sapo_lab.cli import main
from sapo_lab.runs.config import PRESETS, load_config
from sapo_lab.tasks import splits_for, task_for
from sapo_lab.training import device as device_module
from sapo_lab.training import trainer as trainer_module
from sapo_lab.training.cold_start import train_cold_start
from sapo_lab.training.console import PaceReport
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
    assert said and said[0].startswith("no GPU found: device auto chose the CPU"), said
    assert f"a cold start of up to {updates} updates" in said[0] and "GFLOP/s" in said[0]


def test_a_named_cpu_proceeds_without_the_notice(no_gpu, tmp_path):
    # catches the notice keyed on the device found rather than on the fallback the user did not choose
    assert not any("GPU" in line for line in _lines_of_a_new_trainer(tmp_path, load_config("micro", {"device": "cpu"})))


def test_the_command_line_prints_the_notice_as_its_first_line(no_gpu, tmp_path, monkeypatch, capsys):
    # catches the line said after the model loads or the cold start begins (the preset's silent minutes)
    monkeypatch.setattr(trainer_module.Trainer, "train", lambda self: {"status": "interrupted"})
    assert main(["train", "--config", "micro", "--output-dir", str(tmp_path / "run")]) == 130
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("no GPU found: device auto chose the CPU")


def test_a_long_run_is_a_warning_that_says_how_to_shorten_it():
    # catches a 20,000-update cold start announced in the same quiet tone as a two-second run
    long = PlannedWork(10**8, 768, 20000, 1e12, 500, 1e18)
    short = PlannedWork(10**4, 32, 4, 1e6, 3, 1e9)
    cpu = torch.device("cpu")
    assert cpu_fallback_notice("auto", cpu, long).startswith("warning: no GPU found")
    assert "--cold_start.max_updates N and --max_steps N" in cpu_fallback_notice("auto", cpu, long)
    assert not cpu_fallback_notice("auto", cpu, short).startswith("warning")
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
    assert said[0] == "cold start: update 1 of up to 100, loss 2.500, 5.00 s each, up to 8 min left"
    assert len(said) == 2 and said[1].startswith("cold start: update 3 of up to 100")  # 15 s: one interval on


def test_a_quick_loop_reports_nothing():
    # catches the micro preset's second-long cold start printing a line per update
    clock, said = _Clock(), []
    pace = PaceReport(said.append, total=4, what="update", every_s=10.0, clock=clock)
    for n in range(1, 5):
        clock.now += 0.1
        pace(n)
    assert said == []

