"""The GPU path, as far as a machine without a GPU can take it: the device choice, the bf16 autocast branch
run on the CPU (torch's CPU autocast takes the same dtype), and the GPU benchmark in its smoke mode."""

import importlib.util
import warnings
from pathlib import Path

import pytest
import torch
from _micro import QUIET, micro
from _small_gpu_model import shrink_gpu_gpt2_small

from sapo_lab.cli import main
from sapo_lab.training import device as device_module
from sapo_lab.training.device import autocast_for, resolve_device

ROOT = Path(__file__).resolve().parents[2]


def test_auto_picks_cuda_only_where_it_exists(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto").type == "cpu"  # catches "auto" hard-wired to cuda
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto").type == "cuda"  # catches "auto" hard-wired to cpu
    assert resolve_device("cpu").type == "cpu"


def test_an_explicit_cuda_device_without_cuda_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda:0")
    status = main(["train", "--config", "micro", "--output-dir", str(tmp_path / "run"), "--device", "cuda"])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and "CUDA is not available" in err and err.count("\n") == 1


def test_the_cuda_branch_asks_for_bf16_autocast_and_the_cpu_for_none():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # without CUDA torch warns that it disables the context it builds
        ctx = autocast_for(torch.device("cuda"))
    assert isinstance(ctx, torch.autocast) and ctx.fast_dtype == torch.bfloat16 and ctx.device == "cuda"
    assert not isinstance(autocast_for(torch.device("cpu")), torch.autocast)


@pytest.mark.slow
def test_a_run_under_bf16_autocast_trains_on_the_cpu(tmp_path, monkeypatch):
    """The CUDA branch's numerics on the CPU: every module that opens autocast gets bf16 autocast (CPU), and two
    rollout steps train with finite losses. Catches a loss, log-prob or ratio computed in bf16 where the code
    assumes float32 (a dtype mismatch, or a NaN from the ratio's exp), which only a GPU run would otherwise show."""
    opened = []

    def bf16(device):
        opened.append(device.type)
        return torch.autocast("cpu", dtype=torch.bfloat16)

    import sapo_lab.training.cold_start as cold_start
    import sapo_lab.training.rollout as rollout
    import sapo_lab.training.trainer as trainer
    import sapo_lab.training.update as update

    for module in (cold_start, rollout, trainer, update, device_module):
        monkeypatch.setattr(module, "autocast_for", bf16)
    summary = trainer.train(micro(**{"optimization.max_steps": 2, "beta": 0.01}), str(tmp_path / "run"), **QUIET)
    assert summary["status"] == "completed" and opened  # the patched branch ran
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2 and "NaN" not in "".join(rows)


@pytest.mark.slow
def test_the_gpu_benchmark_runs_in_smoke_mode_on_the_cpu(capsys, monkeypatch):
    """The benchmark's script runs end to end without a GPU and prints its lines, and without --smoke it asks
    for one. Catches a benchmark broken by a trainer change (a renamed hook, metric or config key) before
    anyone takes it to a GPU. Its smoke numbers mean nothing, so the model is GPT-2 small's name and
    vocabulary on a one-layer trunk (_small_gpu_model), not the 124M parameters only a GPU run needs."""
    shrink_gpu_gpt2_small(monkeypatch)
    spec = importlib.util.spec_from_file_location("gpu_throughput", ROOT / "benchmarks" / "gpu_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "device: cpu" in out and "generated tokens/s" in out and "mfu=" in out
    assert bench.main([]) == (0 if torch.cuda.is_available() else 2)  # without --smoke it wants a GPU
