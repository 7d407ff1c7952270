"""GPU throughput of sapo_lab at GPT-2-small size: tokens/s and model-FLOPs utilisation (MFU).

Not run yet (no GPU was available when it was written). Usage on a CUDA machine::

    .venv/bin/python benchmarks/gpu_throughput.py [--steps 20] [--warmup 3] [--peak-tflops 989] [--key value ...]

It trains the ``gpu-gpt2-small`` preset (124M parameters, bf16 autocast) from a fresh
initialisation with the cold start skipped - throughput does not depend on what the
model knows, only on sequence lengths, which the fixed-width task keeps constant -
and reads the per-step timings from ``metrics.jsonl``. Zero-advantage skipping is off
(every response is trained), so this is the worst case for the update phase.

MFU counts 2 * params FLOPs per token for every sampling forward (prompt prefill and
each generated token) and 6 * params per token for each teacher-forced
forward+backward on prompt+response, ignoring attention's sequence-length term (small
at these lengths), divided by ``--peak-tflops`` (dense bf16 peak of the GPU; 989 for
an H100/H200 SXM). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from sapo_lab.cli import parse_overrides  # noqa: E402
from sapo_lab.runs.config import load_config  # noqa: E402
from sapo_lab.tasks import task_for  # noqa: E402
from sapo_lab.training.model import MODEL_SIZES, build_model, count_parameters  # noqa: E402
from sapo_lab.training.trainer import train  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    args, rest = ap.parse_known_args()
    if not torch.cuda.is_available():
        print("error: no CUDA device; this benchmark measures GPU throughput", file=sys.stderr)
        return 2
    overrides = {
        "device": "cuda",
        "cold_start.max_updates": 0,
        "cold_start.cache_dir": "",
        # An untrained model earns reward 0 everywhere; without this every update would be skipped.
        "optimization.skip_zero_advantage": False,
        "optimization.max_steps": args.warmup + args.steps,
        "save_steps": 10**6,
        "evaluation.dev_every": 10**6,
        "evaluation.num_samples": 1,
        "evaluation.pass_k": [1],
        "evaluation.greedy": False,
        "task.num_eval": 64,
        **parse_overrides(rest),
    }
    cfg = load_config("gpu-gpt2-small", overrides)
    params = count_parameters(build_model("gpu-gpt2-small", vocab_size=MODEL_SIZES["gpu-gpt2-small"]["vocab_size"]))
    prompt_len = 2 * task_for(cfg).max_digits + 2  # the addition task: "ab+cd="
    with tempfile.TemporaryDirectory() as work:
        train(cfg, os.path.join(work, "run"), log=lambda m: None, progress=False)
        with open(os.path.join(work, "run", "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f][args.warmup :]
    n_resp = cfg.rollout.prompts_per_rollout * cfg.rollout.num_generations
    wall = sum(r["time/step_s"] for r in rows)
    gen_tokens = sum(r["rollout/tokens_generated"] for r in rows)
    # Teacher forcing runs on the padded prompt+response block of every response.
    width = prompt_len + max(r["rollout/response_length_mean"] for r in rows)
    train_tokens = len(rows) * n_resp * width
    sample_tokens = len(rows) * n_resp * prompt_len + gen_tokens
    flops = 2 * params * sample_tokens + 6 * params * train_tokens
    mfu = flops / wall / (args.peak_tflops * 1e12)
    print(
        f"device: {torch.cuda.get_device_name()}; model: {params / 1e6:.1f}M params; "
        f"{n_resp} responses/rollout, K={cfg.optimization.steps_per_generation}"
    )
    print(f"rollout batches/s: {len(rows) / wall:.3f}  ({wall / len(rows):.3f} s each)")
    print(f"generated tokens/s: {gen_tokens / wall:,.0f}   trained tokens/s (prompt+response): {train_tokens / wall:,.0f}")
    print(f"non-model time: {100 * sum(r['time/step_s'] * r['time/non_model_frac'] for r in rows) / wall:.1f}% of a step")
    print(f"mfu={mfu:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
