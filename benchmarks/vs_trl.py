"""Throughput of sapo_lab against TRL's ``GRPOTrainer(loss_type="sapo")`` on the same problems.

Two tasks: ``addition`` (the cpu-tiny preset: 5-token answers) and ``scratchpad``
(``scratchpad_addition``, 22 answer tokens + EOS, ``rollout.max_completion_length=23``).
For each, both frameworks start from the same cold-start GPT-2 and character tokenizer and
train on the same prompts and verifier reward, with the same group size, completion length,
temperature, learning rate and M = steps_per_generation update minibatches per rollout
batch: TRL's settings come from the one declared mapping,
``sapo_lab.integrations.trl.to_grpo_config``. Each side is timed the same way: wall clock
between the ends of rollout batches ``warmup`` and ``warmup + steps`` (a step-end callback
in both), so logging and every other per-step cost count on both sides.

Printed per task: rollout batches per second, their ratio, and sapo_lab's share of that wall
time spent outside model forward/backward/optimizer/sampling (``non_model_frac``; the share
inside the trainer's step alone, as its metrics rows log it, is printed beside it). The last
lines are ``speedup_vs_trl_<task>=X.XX`` per task, then ``speedup_vs_trl=X.XX``, the
minimum over the tasks run. With ``--repeats N`` each task runs N side-by-side pairs, alternating
which framework goes first, and reports the median ratio: on a shared machine the load drifts.

TRL lives in its own environment so that the package's one stays small::

    bash tools/ci_trl.sh        # builds benchmarks/.venv-trl from requirements-trl.txt (CPU torch)
    OMP_NUM_THREADS=1 benchmarks/.venv-trl/bin/python benchmarks/vs_trl.py --task both

sapo_lab is imported from this checkout. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import sapo_lab  # noqa: E402
from sapo_lab.runs.config import load_config  # noqa: E402
from sapo_lab.tasks import splits_for, task_for  # noqa: E402
from sapo_lab.training.cold_start import get_cold_start  # noqa: E402
from sapo_lab.training.trainer import train  # noqa: E402

# Config overrides per benchmark task, on top of the cpu-tiny preset.
TASKS = {
    "addition": {},
    "scratchpad": {"task.name": "scratchpad_addition", "rollout.max_completion_length": 23},
}
# Timed rollout batches per task when --steps is not given: each side runs for tens of seconds on one core.
DEFAULT_STEPS = {"addition": 60, "scratchpad": 25}


def timed_window(stamps: list[float], first: int, last: int) -> float:
    """Seconds between the end of step ``first`` and the end of step ``last`` (1-based step counts)."""
    return stamps[last - 1] - stamps[first - 1]


def bench_sapo_lab(cfg, steps: int, warmup: int, workdir: str, skip_zero_advantage: bool = True,
                   gradient_comparison_every: int = 0) -> dict:
    run = os.path.join(workdir, f"sapo_lab-skip{int(skip_zero_advantage)}-cmp{gradient_comparison_every}")
    cfg = copy.deepcopy(cfg)
    cfg.optimization.skip_zero_advantage = skip_zero_advantage
    # TRL computes no token-versus-sequence gradient comparison, so like-for-like timing turns it off;
    # main() also times the default (every 10 steps) to show what the diagnostic costs.
    cfg.evaluation.gradient_comparison_every = gradient_comparison_every
    # One step past the window, so the dev evaluation the trainer runs at its last step falls outside it.
    cfg.optimization.max_steps = warmup + steps + 1
    cfg.max_train_time_s = 0.0
    cfg.save_steps = 10**6
    cfg.evaluation.dev_every = 10**6
    stamps: list[float] = []

    def clock(trainer, row):
        stamps.append(time.perf_counter())
        if trainer.step == warmup + steps:
            trainer.request_stop()  # the window is over: skip the final evaluation, which TRL does not run either

    train(cfg, run, log=lambda m: None, progress=False, on_step_end=clock)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f][warmup : warmup + steps]
    wall = timed_window(stamps, warmup, warmup + steps)
    step_s = sum(r["time/step_s"] for r in rows)
    model_s = sum(r["time/step_s"] * (1 - r["time/non_model_frac"]) for r in rows)
    return {
        "batches_per_s": steps / wall,
        "step_s": wall / steps,
        "non_model_frac": (wall - model_s) / wall,  # everything between step ends that is not model work
        "in_step_non_model_frac": (step_s - model_s) / step_s,  # the trainer's own non_model_frac, pooled
    }


def bench_trl(cfg, model, tok, splits, steps: int, warmup: int, workdir: str) -> dict:
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from sapo_lab.integrations.trl import reward_function, to_dataset, to_grpo_config

    k = cfg.optimization.steps_per_generation
    data = to_dataset(splits["train"])
    reward = reward_function(task=task_for(cfg), eos_token_ids=[tok.eos_token_id])

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
    wall = timed_window(stamps, k * warmup, k * (warmup + steps))  # TRL counts optimizer steps: M per rollout batch
    return {"batches_per_s": steps / wall, "step_s": wall / steps}


def bench_task(name: str, args, cache_dir: str, work: str) -> dict:
    """Every measurement of one task; prints them and returns sapo_lab's and TRL's like-for-like numbers."""
    steps = args.steps or DEFAULT_STEPS[name]
    cfg = load_config("cpu-tiny", {"seed": args.seed, "device": "cpu", "cold_start.cache_dir": cache_dir,
                                   **TASKS[name]})
    if cfg.threads:
        torch.set_num_threads(cfg.threads)  # the same thread count for both frameworks
    splits = splits_for(cfg)
    t0 = time.perf_counter()
    model, tok, report = get_cold_start(cfg, splits, torch.device("cpu"), log=lambda m: None)
    r = cfg.rollout
    tag = f"[{name}]"
    print(
        f"{tag} task {cfg.task.name}: {r.prompts_per_rollout} prompts x G={r.num_generations}, max_completion_length="
        f"{r.max_completion_length}, M={cfg.optimization.steps_per_generation} minibatches/rollout, "
        f"torch threads={torch.get_num_threads()}; {steps} timed rollout batches after {args.warmup}; cold start "
        f"{'cached' if report['cached'] else f'trained in {time.perf_counter() - t0:.0f} s'} "
        f"({report['updates']} SFT updates, dev Pass@1 {report['dev_pass1']})",
        flush=True,
    )
    pairs = []
    for rep in range(args.repeats):
        # Alternate which framework goes first, so that a load change on the shared machine favours neither.
        rep_dir = os.path.join(work, name, f"repeat{rep}")
        order = ("sapo_lab", "trl") if rep % 2 == 0 else ("trl", "sapo_lab")
        got = {}
        for side in order:
            if side == "sapo_lab":
                got[side] = bench_sapo_lab(cfg, steps, args.warmup, rep_dir)
            else:
                got[side] = bench_trl(cfg, copy.deepcopy(model), tok, splits, steps, args.warmup, rep_dir)
        ours, theirs = got["sapo_lab"], got["trl"]
        pairs.append((ours, theirs))
        print(
            f"{tag} repeat {rep + 1}/{args.repeats} ({order[0]} first): sapo_lab {ours['batches_per_s']:.3f} rollout "
            f"batches/s ({ours['step_s']:.3f} s/batch), trl {theirs['batches_per_s']:.3f} ({theirs['step_s']:.3f} "
            f"s/batch): {ours['batches_per_s'] / theirs['batches_per_s']:.2f}x; time outside model "
            f"forward/backward/sampling: {100 * ours['non_model_frac']:.1f}% of sapo_lab's wall time "
            f"({100 * ours['in_step_non_model_frac']:.1f}% inside the trainer's step)",
            flush=True,
        )
    if args.variants:
        variants_dir = os.path.join(work, name, "variants")
        # The same with every response trained, to show what zero-advantage skipping contributes.
        full = bench_sapo_lab(cfg, steps, args.warmup, variants_dir, skip_zero_advantage=False)
        every = cfg.evaluation.gradient_comparison_every
        diag = bench_sapo_lab(cfg, steps, args.warmup, variants_dir, gradient_comparison_every=every)
        trl_rate = statistics.median(theirs["batches_per_s"] for _, theirs in pairs)
        print(
            f"{tag} sapo_lab, skip_zero_advantage=False: {full['batches_per_s']:.3f} rollout batches/s "
            f"({full['step_s']:.3f} s/batch), {full['batches_per_s'] / trl_rate:.2f}x TRL's median; "
            f"non-model {100 * full['non_model_frac']:.1f}%",
            flush=True,
        )
        print(
            f"{tag} sapo_lab, gradient comparison every {every} steps (the default): {diag['batches_per_s']:.3f} "
            f"rollout batches/s ({diag['step_s']:.3f} s/batch), {diag['batches_per_s'] / trl_rate:.2f}x TRL's median",
            flush=True,
        )
    # The median over repeats of each side-by-side ratio, and of sapo_lab's non-model share.
    return {
        "speedup": statistics.median(o["batches_per_s"] / t["batches_per_s"] for o, t in pairs),
        "non_model_frac": statistics.median(o["non_model_frac"] for o, _ in pairs),
        "in_step_non_model_frac": statistics.median(o["in_step_non_model_frac"] for o, _ in pairs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=[*TASKS, "both"], default="both")
    ap.add_argument("--steps", type=int, default=0,
                    help=f"timed rollout batches per framework and task (default per task: {DEFAULT_STEPS})")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1,
                    help="side-by-side pairs per task, alternating which framework runs first; the median ratio counts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-variants", dest="variants", action="store_false",
                    help="skip the two extra sapo_lab timings (no zero-advantage skipping; default diagnostics)")
    ap.add_argument("--cold-start-cache", default="",
                    help="cold-start cache folder, kept between invocations (default: a temporary one per invocation)")
    args = ap.parse_args()
    if args.steps < 0 or args.warmup < 1 or args.repeats < 1:
        ap.error("--steps must be >= 0 (0: the per-task default), --warmup and --repeats >= 1")
    names = list(TASKS) if args.task == "both" else [args.task]
    print(f"sapo_lab from {os.path.dirname(sapo_lab.__file__)}; load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory() as work:
        cache_dir = args.cold_start_cache or os.path.join(work, "cold_start")
        results = {name: bench_task(name, args, cache_dir, work) for name in names}
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    for name, res in results.items():
        print(f"in_step_non_model_frac_{name}={res['in_step_non_model_frac']:.3f}")
    for name, res in results.items():
        print(f"non_model_frac_{name}={res['non_model_frac']:.3f}")
    for name, res in results.items():
        print(f"speedup_vs_trl_{name}={res['speedup']:.2f}")
    print(f"speedup_vs_trl={min(res['speedup'] for res in results.values()):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
