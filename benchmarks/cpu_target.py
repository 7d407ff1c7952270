"""CPU target: SAPO with the default preset gains >= 25 Pass@1 points in <= 5 minutes, on 3 seeds.

Runs ``python -m sapo_lab train`` (the default ``cpu-tiny`` preset) once per seed, in a
fresh process each, and checks every ``summary.json``: held-out Pass@1 gain over the
cold start and the training wall time (the cold start itself is reported separately).

    .venv/bin/python benchmarks/cpu_target.py [--seeds 0,1,2] [--output-dir runs/bench-cpu-target] [--key value ...]

Extra ``--key value`` pairs are passed through as config overrides. Exit status 0 iff
every seed meets the target. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

MIN_GAIN = 0.25
MAX_TRAIN_S = 300.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--output-dir", default="runs/bench-cpu-target")
    ap.add_argument("--loss-type", default="sapo")
    ap.add_argument("--keep", action="store_true", help="reuse finished runs instead of starting over")
    args, extra = ap.parse_known_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for seed in seeds:
        run = os.path.join(args.output_dir, f"{args.loss_type}-seed{seed}")
        if not (args.keep and os.path.isfile(os.path.join(run, "summary.json"))):
            shutil.rmtree(run, ignore_errors=True)
            t0 = time.perf_counter()
            cmd = [
                sys.executable,
                "-m",
                "sapo_lab",
                "train",
                "--config",
                "cpu-tiny",
                "--output-dir",
                run,
                "--seed",
                str(seed),
                "--loss_type",
                args.loss_type,
                *extra,
            ]
            print("$", " ".join(cmd), flush=True)
            proc = subprocess.run(cmd)
            if proc.returncode != 0:
                print(f"seed {seed}: train exited with {proc.returncode}", file=sys.stderr)
                return 1
            print(f"seed {seed}: process wall {time.perf_counter() - t0:.1f}s", flush=True)
        with open(os.path.join(run, "summary.json")) as f:
            s = json.load(f)
        cs = s["cold_start_eval"].get("cold_start", {})
        rows.append(
            {
                "seed": seed,
                "cold_start_pass1": s["cold_start_pass1"],
                "cold_start_ci": s["cold_start_pass1_ci95"],
                "final_pass1": s["final_pass1"],
                "final_ci": s["final_pass1_ci95"],
                "gain": s["pass1_gain"],
                "train_wall_s": s["train_wall_s"],
                "steps": s["steps"],
                "cold_start_updates": cs.get("updates"),
                "cold_start_wall_s": cs.get("wall_s"),
                "final_greedy": s.get("final_greedy_accuracy"),
                "ok": s["pass1_gain"] >= MIN_GAIN and s["train_wall_s"] <= MAX_TRAIN_S,
            }
        )
    print(f"\nhardware: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; python {platform.python_version()}")
    print(f"{'seed':>4}  {'cold start Pass@1':<22}{'final Pass@1':<22}{'gain':>7}{'train s':>9}{'cold s':>8}  ok")
    for r in rows:
        print(
            f"{r['seed']:>4}  {100 * r['cold_start_pass1']:5.1f} [{100 * r['cold_start_ci'][0]:.1f},"
            f" {100 * r['cold_start_ci'][1]:.1f}]   {100 * r['final_pass1']:5.1f} [{100 * r['final_ci'][0]:.1f},"
            f" {100 * r['final_ci'][1]:.1f}]   {100 * r['gain']:+6.1f}{r['train_wall_s']:>9.1f}"
            f"{(r['cold_start_wall_s'] or 0):>8.1f}  {'yes' if r['ok'] else 'NO'}"
        )
    with open(os.path.join(args.output_dir, "cpu_target.json"), "w") as f:
        json.dump(rows, f, indent=2)
    ok = all(r["ok"] for r in rows)
    print(f"target (gain >= {100 * MIN_GAIN:.0f} points within {MAX_TRAIN_S:.0f}s on every seed): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
