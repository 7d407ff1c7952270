"""Measure the training part's Pass@1 gain for several seeds of a module, to set ``TRAIN_MIN_GAIN``.

    python assignment/measure_training.py MODULE --seeds 0,1,2,3 --steps 250 [--jobs 4]

Each seed trains ``cpu-tiny`` for exactly ``--steps`` steps (no wall-clock limit) with the module's ``sapo_loss``,
in its own process, and prints one JSON line: seed, steps, Pass@1 before and after, gain, seconds. Run it with a
correct module and with a broken one; the threshold belongs between the two with a margin to the correct module's
smallest gain (the grader's ``TRAIN_MEASURED`` records the numbers used).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def one(module_path: str, seed: int, steps: int) -> dict:
    from sapo_lab.course import grader

    started = time.perf_counter()
    module = grader.load_module(module_path)
    result, summary = grader.train_part(module, overrides={**grader.TRAIN_OVERRIDES, "seed": seed,
                                                           "optimization.max_steps": steps}, min_gain=float("-inf"))
    row = {"module": module_path, "seed": seed, "steps": steps, "note": result.note,
           "seconds": round(time.perf_counter() - started, 1)}
    if summary:
        row.update({k: summary.get(k) for k in ("cold_start_pass1", "final_pass1", "pass1_gain", "steps", "train_wall_s")})
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("module")
    p.add_argument("--seeds", default="0,1,2,3")
    p.add_argument("--steps", type=int, default=None, help="default: the grader's TRAIN_STEPS")
    p.add_argument("--jobs", type=int, default=1)
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.steps is None:
        from sapo_lab.course.grader import TRAIN_STEPS

        args.steps = TRAIN_STEPS
    with ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(one, [args.module] * len(seeds), seeds, [args.steps] * len(seeds)):
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
