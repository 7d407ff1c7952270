"""Which CPU kernel settings make runs portable, and what each costs: fingerprints and speed side by side.

For each setting of ``sapo_lab.runs.kernels.KERNEL_SETTINGS`` this machine's kernel fingerprint is computed
in a fresh interpreter (torch reads the setting once, when it loads) and recorded in
``results/kernel_fingerprints.json`` under this CPU kind, so that the file grows as the project meets new
kinds: two kinds that give one fingerprint under a setting compute the same bits under it. Then the same
cpu-tiny work (a short cold start and a few rollout steps at the preset's batch sizes, one thread) is timed
under every setting, interleaved round by round so that a busy machine slows each alike; the ratios to
``native`` are the cost.

    python benchmarks/kernel_portability.py [--rounds 3] [--smoke]

``--smoke`` (CI) runs one round of a few updates to prove the script works; its times mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sapo_lab.runs.kernels import KERNEL_SETTINGS, VARIABLES

HERE = Path(__file__).resolve().parent
RECORD = HERE.parent / "results" / "kernel_fingerprints.json"
WORK = """
import sys, tempfile, time
from sapo_lab.runs.config import load_config
from sapo_lab.training.trainer import train
updates, steps = int(sys.argv[1]), int(sys.argv[2])
cfg = load_config("cpu-tiny", {"cold_start.max_updates": updates, "cold_start.eval_every": max(updates, 1),
                               "cold_start.cache_dir": "", "optimization.max_steps": steps, "max_train_time_s": 0,
                               "evaluation.dev_every": 10**6, "task.num_eval": 64})
with tempfile.TemporaryDirectory() as out:
    t0 = time.perf_counter()
    train(cfg, out, log=lambda m: None, progress=False)
    print(time.perf_counter() - t0)
"""


def cpu_kind() -> dict:
    """What names this CPU kind: model name, and whether it has AVX-512 and AVX2."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                 platform.processor() or platform.machine())
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    family = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("cpu family")), "?")
    number = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model\t")), "?")
    return {"model": model, "family": family, "model_number": number, "avx512f": "avx512f" in flags,
            "avx2": "avx2" in flags, "machine": platform.machine()}


def _env(setting: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(KERNEL_SETTINGS[setting], OMP_NUM_THREADS="1")
    return env


def fingerprint(setting: str) -> str:
    code = "from sapo_lab.studies.environment import kernel_fingerprint; print(kernel_fingerprint())"
    out = subprocess.run([sys.executable, "-c", code], env=_env(setting), capture_output=True, text=True, check=True)
    return out.stdout.split()[-1]


def timed(setting: str, updates: int, steps: int) -> float:
    out = subprocess.run([sys.executable, "-c", WORK, str(updates), str(steps)], env=_env(setting),
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the timed work failed under {setting!r}: {out.stderr.strip().splitlines()[-1:]}")
    return float(out.stdout.split()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--updates", type=int, default=60, help="cold-start SFT updates timed per round")
    p.add_argument("--steps", type=int, default=4, help="rollout steps timed per round")
    p.add_argument("--smoke", action="store_true", help="one tiny round; record nothing")
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.updates, args.steps = 1, 2, 1
    kind = cpu_kind()
    prints = {s: fingerprint(s) for s in KERNEL_SETTINGS}
    print(f"CPU: {kind['model']} (family {kind['family']}, model {kind['model_number']}, "
          f"AVX-512 {'yes' if kind['avx512f'] else 'no'})")
    for s, fp in prints.items():
        print(f"  {s:<7} fingerprint {fp}")
    times: dict[str, list[float]] = {s: [] for s in KERNEL_SETTINGS}
    for r in range(args.rounds):
        for s in KERNEL_SETTINGS:
            times[s].append(timed(s, args.updates, args.steps))
        print(f"  round {r + 1}/{args.rounds}: " + ", ".join(f"{s} {times[s][-1]:.1f} s" for s in KERNEL_SETTINGS),
              flush=True)
    base = statistics.median(times["native"])
    ratios = {s: statistics.median(t) / base for s, t in times.items()}
    for s in KERNEL_SETTINGS:
        print(f"  {s:<7} median {statistics.median(times[s]):.1f} s, {ratios[s]:.2f}x native's time")
    if args.smoke:
        return 0
    record = json.loads(RECORD.read_text()) if RECORD.is_file() else {"kinds": []}
    entry = {**kind, "fingerprints": prints, "measured_utc": time.strftime("%Y-%m-%d", time.gmtime()),
             "work": f"cpu-tiny, {args.updates} cold-start updates + {args.steps} rollout steps, one thread",
             "median_s": {s: round(statistics.median(t), 2) for s, t in times.items()},
             "time_vs_native": {s: round(x, 3) for s, x in ratios.items()}, "rounds": args.rounds}
    record["kinds"] = [k for k in record["kinds"] if k["fingerprints"] != prints or k["model"] != kind["model"]]
    record["kinds"].append(entry)
    RECORD.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"recorded: {RECORD}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
