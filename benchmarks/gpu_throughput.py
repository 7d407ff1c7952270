"""GPU throughput of sapo_lab at GPT-2-small size: generation tokens/s and the update phase's MFU, apart.

Usage on a CUDA machine::

    .venv/bin/python benchmarks/gpu_throughput.py [--steps 20] [--warmup 3] [--peak-tflops 989] [--key value ...]

It trains the ``gpu-gpt2-small`` preset (124M parameters, bf16 autocast) from a fresh
initialisation with the cold start skipped - throughput does not depend on what the
model knows, only on sequence lengths, which the fixed-width task keeps constant. Zero-advantage
skipping is off (every response is trained), so this is the worst case for the update phase.

The two phases are reported apart because they are bound by different things. Generation at this
size samples a few tokens per response, one small forward per token: it is bound by kernel-launch
latency, so its figure is tokens per second, not a FLOP rate. The update phase (teacher-forced
forward and backward over prompt+response, M minibatches) is bound by FLOPs: its MFU counts
6 * params per token (attention's sequence-length term ignored, small at these lengths) over the
update phase's own seconds, divided by ``--peak-tflops`` (dense bf16 peak; 989 for an H100/H200 SXM).

``--smoke`` runs the same code on the CPU with two prompts, two steps and no warm-up, so that CI
proves the script works without a GPU; its numbers mean nothing.
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
from sapo_lab.training.trainer import Trainer  # noqa: E402


class _PhaseTimer(Trainer):
    """The trainer, recording each rollout's sampling seconds (the rest of a step is the update phase)."""

    sample_seconds: list

    def _sample_rollout(self, timer):
        batch = super()._sample_rollout(timer)
        self.sample_seconds.append(batch.sample_s)
        return batch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="sapo_lab's throughput at GPT-2-small size, generation and update apart")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--smoke", action="store_true", help="CPU, two prompts, two steps: proves the script runs")
    args, rest = ap.parse_known_args(argv)
    if args.smoke:
        args.steps, args.warmup = 2, 0
        rest = ["--device", "cpu", "--prompts_per_rollout", "2", "--num_generations", "2", *rest]
    elif not torch.cuda.is_available():
        print("error: no CUDA device; this benchmark measures GPU throughput (--smoke runs it on the CPU)",
              file=sys.stderr)
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
        "task.num_eval": 8 if args.smoke else 64,
        **parse_overrides(rest),
    }
    cfg = load_config("gpu-gpt2-small", overrides)
    params = count_parameters(build_model("gpu-gpt2-small", vocab_size=MODEL_SIZES["gpu-gpt2-small"]["vocab_size"]))
    prompt_len = 2 * task_for(cfg).max_digits + 2  # the addition task: "ab+cd="
    with tempfile.TemporaryDirectory() as work:
        trainer = _PhaseTimer(cfg, os.path.join(work, "run"), log=lambda m: None, progress=False)
        trainer.sample_seconds = []
        trainer.train()
        with open(os.path.join(work, "run", "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f][args.warmup :]
    sample_s = trainer.sample_seconds[args.warmup : args.warmup + len(rows)]
    n_resp = cfg.rollout.prompts_per_rollout * cfg.rollout.num_generations
    wall = sum(r["time/step_s"] for r in rows)
    generate_s = sum(sample_s)
    update_s = wall - generate_s
    gen_tokens = sum(r["rollout/tokens_generated"] for r in rows)
    # Teacher forcing runs on the padded prompt+response block of every response.
    width = prompt_len + max(r["rollout/response_length_mean"] for r in rows)
    train_tokens = len(rows) * n_resp * width
    update_mfu = 6 * params * train_tokens / update_s / (args.peak_tflops * 1e12)
    device = torch.cuda.get_device_name() if cfg.device != "cpu" and torch.cuda.is_available() else "cpu"
    print(f"device: {device}; model: {params / 1e6:.1f}M params; "
          f"{n_resp} responses/rollout, K={cfg.optimization.steps_per_generation}")
    print(f"rollout batches/s: {len(rows) / wall:.3f}  ({wall / len(rows):.3f} s each: "
          f"generation {generate_s / len(rows):.3f} s, update {update_s / len(rows):.3f} s)")
    print(f"generation: {gen_tokens / generate_s:,.0f} generated tokens/s (launch-bound; no FLOP rate)")
    print(f"update: {train_tokens / update_s:,.0f} trained tokens/s (prompt+response), "
          f"mfu={update_mfu:.4f} of {args.peak_tflops:g} TFLOP/s")
    print(f"non-model time: {100 * sum(r['time/step_s'] * r['time/non_model_frac'] for r in rows) / wall:.1f}% of a step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
