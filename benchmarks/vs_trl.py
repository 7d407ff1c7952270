"""Throughput of sapo_lab against TRL's ``GRPOTrainer(loss_type="sapo")`` on the same problem.

Both start from the same cold-start GPT-2 (cpu-tiny preset) and character tokenizer and
train on the same prompts and reward, with the same group size, completion length,
temperature, learning rate and K = steps_per_generation update minibatches per rollout
batch. The script times ``--steps`` rollout batches after ``--warmup`` of them for each
and prints rollout batches per second, their ratio, and sapo_lab's fraction of step
time spent outside model forward/backward/optimizer/sampling. The last line is
``speedup_vs_trl=X.XX``.

TRL lives in its own environment so that the package's one stays small::

    bash tools/ci_trl.sh        # builds benchmarks/.venv-trl from requirements-trl.txt (CPU torch)
    benchmarks/.venv-trl/bin/python benchmarks/vs_trl.py

TRL's settings come from the one declared mapping, ``sapo_lab.integrations.trl.to_grpo_config``.
sapo_lab is imported from this checkout. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from sapo_lab.tasks import splits_for  # noqa: E402
from sapo_lab.training.cold_start import get_cold_start  # noqa: E402
from sapo_lab.training.config import load_config  # noqa: E402
from sapo_lab.training.trainer import train  # noqa: E402


def bench_sapo_lab(cfg, steps: int, warmup: int, workdir: str, skip_zero_advantage: bool = True,
                   gradient_comparison_every: int = 0) -> dict:
    run = os.path.join(workdir, f"sapo_lab-skip{int(skip_zero_advantage)}-cmp{gradient_comparison_every}")
    cfg = copy.deepcopy(cfg)
    cfg.optimization.skip_zero_advantage = skip_zero_advantage
    # TRL computes no token-versus-sequence gradient comparison, so like-for-like timing turns it off;
    # main() also times the default (every 10 steps) to show what the diagnostic costs.
    cfg.evaluation.gradient_comparison_every = gradient_comparison_every
    cfg.optimization.max_steps = warmup + steps
    cfg.save_steps = 10**6
    cfg.evaluation.dev_every = 10**6
    cfg.evaluation.num_samples = 1
    cfg.evaluation.pass_k = (1,)
    cfg.evaluation.greedy = False
    train(cfg, run, log=lambda m: None, progress=False)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f][warmup:]
    wall = sum(r["step_s"] for r in rows)
    other = sum(r["step_s"] * r["non_model_frac"] for r in rows)
    return {"batches_per_s": len(rows) / wall, "step_s": wall / len(rows), "non_model_frac": other / wall}


def bench_trl(cfg, model, tok, splits, steps: int, warmup: int, workdir: str) -> dict:
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from sapo_lab.integrations.trl import reward_function, to_dataset, to_grpo_config

    k = cfg.optimization.steps_per_generation
    data = to_dataset(splits["train"])
    reward = reward_function(eos_token_ids=[tok.eos_token_id])

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

    # The one declared mapping (sapo_lab.integrations.trl), plus what only a benchmark wants.
    args = to_grpo_config(
        cfg,
        num_processes=1,
        output_dir=os.path.join(workdir, "trl"),
        max_steps=k * (warmup + steps),
        logging_steps=10**6,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok, callbacks=[Clock()]
    )
    trainer.train()
    start, end = stamps[k * warmup - 1], stamps[k * (warmup + steps) - 1]
    return {"batches_per_s": steps / (end - start), "step_s": (end - start) / steps}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10, help="timed rollout batches per framework")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg = load_config("cpu-tiny", {"seed": args.seed, "device": "cpu"})
    if cfg.threads:
        torch.set_num_threads(cfg.threads)  # the same thread count for both frameworks
    splits = splits_for(cfg)
    model, tok, _ = get_cold_start(cfg, splits, torch.device("cpu"), log=lambda m: None)
    r = cfg.rollout
    print(
        f"problem: {r.prompts_per_rollout} prompts x G={r.num_generations}, max_completion_length="
        f"{r.max_completion_length}, K={cfg.optimization.steps_per_generation} minibatches/rollout, "
        f"torch threads={torch.get_num_threads()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as work:
        ours = bench_sapo_lab(cfg, args.steps, args.warmup, work)
        print(
            f"sapo_lab: {ours['batches_per_s']:.3f} rollout batches/s ({ours['step_s']:.3f} s/batch); "
            f"time outside model forward/backward/sampling: {100 * ours['non_model_frac']:.1f}% of a step",
            flush=True,
        )
        # The same with every response trained, to show what zero-advantage skipping contributes.
        full = bench_sapo_lab(cfg, args.steps, args.warmup, work, skip_zero_advantage=False)
        print(
            f"sapo_lab, skip_zero_advantage=False: {full['batches_per_s']:.3f} rollout batches/s "
            f"({full['step_s']:.3f} s/batch); non-model {100 * full['non_model_frac']:.1f}%",
            flush=True,
        )
        default_cfg_every = cfg.evaluation.gradient_comparison_every
        diag = bench_sapo_lab(cfg, args.steps, args.warmup, work, gradient_comparison_every=default_cfg_every)
        print(
            f"sapo_lab, gradient comparison every {default_cfg_every} steps (the default): "
            f"{diag['batches_per_s']:.3f} rollout batches/s ({diag['step_s']:.3f} s/batch)",
            flush=True,
        )
        theirs = bench_trl(cfg, copy.deepcopy(model), tok, splits, args.steps, args.warmup, work)
        print(f"trl:      {theirs['batches_per_s']:.3f} rollout batches/s ({theirs['step_s']:.3f} s/batch)", flush=True)
    speedup = ours["batches_per_s"] / theirs["batches_per_s"]
    print(f"speedup_vs_trl_without_skipping={full['batches_per_s'] / theirs['batches_per_s']:.2f}")
    print(f"speedup_vs_trl_with_default_diagnostics={diag['batches_per_s'] / theirs['batches_per_s']:.2f}")
    print(f"non_model_frac={ours['non_model_frac']:.3f}")
    print(f"speedup_vs_trl={speedup:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
