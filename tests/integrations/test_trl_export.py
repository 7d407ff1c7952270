"""The exported train_trl.py trains on CPU from a fresh directory, in one process and in two (gloo)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from _micro import micro
from _trl import require_trl

require_trl()

from sapo_lab.integrations.trl import to_grpo_config  # noqa: E402
from sapo_lab.integrations.trl_export import export  # noqa: E402
from sapo_lab.training.model import build_model  # noqa: E402
from sapo_lab.training.tokenizer import build_char_tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A local cpu-micro model directory (no hub download) and an export that uses it."""
    base = tmp_path_factory.mktemp("trl_export")
    model_dir = str(base / "model")
    build_model("cpu-micro", seed=0).save_pretrained(model_dir)
    build_char_tokenizer().save_pretrained(model_dir)
    out = str(base / "export")
    export(micro(threads=1), out, source="micro", model=model_dir)
    return out, model_dir


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("WORLD_SIZE", None)
    return env


def _summary(run_dir):
    with open(os.path.join(run_dir, "trl_summary.json")) as f:
        return json.load(f)


def test_export_writes_the_files_and_embeds_the_config(exported):
    out, model_dir = exported
    assert sorted(os.listdir(out)) == ["README.md", "accelerate_config.yaml", "config.json", "train_trl.py"]
    script = open(os.path.join(out, "train_trl.py")).read()
    assert repr(model_dir) in script
    readme = open(os.path.join(out, "README.md")).read()
    assert "--use_deepspeed --zero_stage 2" in readme and "--num_processes N" in readme


@pytest.mark.slow
def test_train_trl_runs_two_steps_on_cpu(exported, tmp_path):
    out, _ = exported
    run = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, os.path.join(out, "train_trl.py"), "--output-dir", run, "--max-steps", "2", "--cpu"],
        env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = _summary(run)
    k = micro().optimization.steps_per_generation
    assert s["status"] == "completed" and s["optimizer_steps"] == 2 * k and s["num_processes"] == 1
    assert sum(s["verifier_reasons_this_process"].values()) == 2 * 4 * 4  # 2 rollouts x 4 prompts x G=4
    assert os.path.isfile(os.path.join(run, "final_model", "config.json"))
    again = subprocess.run(
        [sys.executable, os.path.join(out, "train_trl.py"), "--output-dir", run, "--max-steps", "2", "--cpu"],
        env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert again.returncode == 2 and "already holds a TRL run" in again.stderr  # never overwrites a run


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes(exported, tmp_path):
    out, _ = exported
    accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which("accelerate")
    assert accelerate, "accelerate's launcher is not installed next to this Python"
    run = str(tmp_path / "run2")
    proc = subprocess.run(
        [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
         "--dynamo_backend", "no", os.path.join(out, "train_trl.py"), "--cpu", "--output-dir", run, "--max-steps", "2"],
        env=_env(), capture_output=True, text=True, timeout=400, cwd=out,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = _summary(run)
    assert s["num_processes"] == 2 and s["status"] == "completed"
    # Each process trains half of every optimizer step's responses: same step count, half the verdicts here.
    assert s["optimizer_steps"] == 2 * micro().optimization.steps_per_generation
    assert sum(s["verifier_reasons_this_process"].values()) == 2 * 4 * 4 // 2


def test_mapped_values_reach_grpo_config(tmp_path):
    """Wiring: every mapped field changes what GRPOConfig holds (a forgotten row would leave TRL's default)."""
    cfg = micro(**{"loss.sapo_temperature_pos": 0.7, "loss.sapo_temperature_neg": 1.3, "loss.epsilon": 0.11,
                   "rollout.temperature": 0.8, "optimization.adam_beta1": 0.85, "optimization.weight_decay": 0.01,
                   "optimization.beta": 0.02, "seed": 5, "device": "cpu"})
    args = to_grpo_config(cfg, num_processes=1, output_dir=str(tmp_path))
    assert (args.sapo_temperature_pos, args.sapo_temperature_neg, args.epsilon) == (0.7, 1.3, 0.11)
    assert (args.temperature, args.adam_beta1, args.weight_decay, args.beta, args.seed) == (0.8, 0.85, 0.01, 0.02, 5)
    assert args.loss_type == "sapo" and args.steps_per_generation == 4 and args.num_iterations == 1
    assert args.per_device_train_batch_size == 4 and args.max_steps == 16 and args.use_cpu
    two = to_grpo_config(cfg, num_processes=2, output_dir=str(tmp_path))
    assert two.per_device_train_batch_size == 2


def test_the_guards_vllm_default_is_trls():
    """The top-p guard assumes TRL applies vLLM's importance-sampling correction unless told not to: a TRL whose
    default changed would make the guard refuse runs that are not biased (or miss ones that are)."""
    from trl import GRPOConfig

    from sapo_lab.integrations import trl as mapping

    field = GRPOConfig.__dataclass_fields__["vllm_importance_sampling_correction"]
    assert field.default is mapping._VLLM_IS_DEFAULT
