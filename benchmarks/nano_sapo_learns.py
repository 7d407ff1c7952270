"""Does nano_sapo learn? Held-out greedy Pass@1 before and after its RL steps, per seed and loss.

    .venv/bin/python benchmarks/nano_sapo_learns.py [--seeds 0 1 2] [--steps 150] [--loss sapo grpo]

Prints one row per (loss, seed): the warm-start Pass@1, the final one, the gain and the wall time, and exits 1
when a SAPO seed gains less than ``--min-gain`` (default 0.05: five points of Pass@1 on 256 held-out problems).
Not a test: it takes minutes and its timings depend on the machine's load.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from sapo_lab.course import nano_sapo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=nano_sapo.Settings.steps)
    parser.add_argument("--loss", nargs="+", choices=("sapo", "grpo"), default=["sapo"])
    parser.add_argument("--min-gain", type=float, default=0.05)
    args = parser.parse_args()
    torch.set_num_threads(1)
    failed = False
    print("| loss | seed | steps | warm-start Pass@1 | final Pass@1 | gain | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for loss in args.loss:
        for seed in args.seeds:
            start = time.time()
            out = nano_sapo.train(nano_sapo.Settings(steps=args.steps, seed=seed),
                                  nano_sapo.sapo_loss if loss == "sapo" else nano_sapo.grpo_loss,
                                  log=lambda line: None)
            gain = out["after"] - out["before"]
            failed |= loss == "sapo" and gain < args.min_gain
            print(f"| {loss} | {seed} | {args.steps} | {out['before']:.3f} | {out['after']:.3f} | {gain:+.3f} | "
                  f"{time.time() - start:.0f} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
