"""Parity of outcomes: the exported TRL run against ``sapo_lab train``, same cold start, same config, 3 seeds.

Both start from one cold-start checkpoint (made once, saved to ``WORK/cold_start``), train the
same config (``--config`` plus ``--max-steps``, no wall-clock guard so both do every step) and
are scored by the same evaluator (``sapo_lab.training.evaluation.held_out_eval`` on the untouched eval
split, with the seeds ``sapo_lab train`` uses). The TRL side runs the files that
``python -m sapo_lab export-trl`` writes. Prints a table and writes ``WORK/parity.json``;
the last line is ``mean_gain_sapo_lab=... mean_gain_trl=...``.

Needs TRL, so run it with the TRL environment (``bash tools/ci_trl.sh`` builds it)::

    nice -n 10 benchmarks/.venv-trl/bin/python benchmarks/trl_parity.py --max-steps 200 --work runs/trl_parity

Not part of the test suite (minutes of CPU per seed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from sapo_lab.integrations.trl_export import export  # noqa: E402
from sapo_lab.runs.config import load_config  # noqa: E402
from sapo_lab.tasks import splits_for, task_for  # noqa: E402
from sapo_lab.training.cold_start import get_cold_start, save_pretrained_atomic  # noqa: E402
from sapo_lab.training.evaluation import held_out_eval  # noqa: E402
from sapo_lab.training.model import load_model_and_tokenizer  # noqa: E402
from sapo_lab.training.seeds import final_eval_seed  # noqa: E402

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}  # Student t, two-sided 95%


def mean_ci(xs: list[float]) -> tuple[float, float, float]:
    """Mean and a 95% t interval across seeds."""
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    h = T_975.get(len(xs) - 1, 1.96) * sd / math.sqrt(len(xs))
    return m, m - h, m + h


def dev_eval_seconds(run_dir: str) -> float:
    """Time ``sapo_lab train`` spent on its periodic dev Pass@1 (inside train_wall_s; TRL's run has none)."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return sum(json.loads(line).get("dev_eval_s") or 0.0 for line in f if line.strip())


def _run(cmd: list[str], log_path: str) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT, TOKENIZERS_PARALLELISM="false")
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}), see {log_path}: {' '.join(cmd)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu-tiny")
    ap.add_argument("--max-steps", type=int, default=200, help="rollout steps for both")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--work", default="runs/trl_parity", help="a new directory")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if os.path.exists(os.path.join(args.work, "parity.json")):
        raise SystemExit(f"{args.work} already holds a parity run")
    os.makedirs(args.work, exist_ok=True)
    overrides = {"optimization.max_steps": args.max_steps, "max_train_time_s": 0, "device": "cpu"}
    cfg = load_config(args.config, overrides)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    splits = splits_for(cfg)
    cold_dir = os.path.abspath(os.path.join(args.work, "cold_start"))
    if not os.path.isdir(cold_dir):
        model, tok, report = get_cold_start(cfg, splits, torch.device("cpu"), log=lambda m: None)
        save_pretrained_atomic(model, tok, cold_dir)
        print(f"cold start: {report['updates']} SFT updates", flush=True)

    # Both runs start from cold_dir with no further SFT; the config file is shared.
    run_cfg = load_config(args.config, {**overrides, "model.name_or_path": cold_dir, "cold_start.max_updates": 0,
                                        "cold_start.cache_dir": ""})
    cfg_path = os.path.join(args.work, "config.json")
    run_cfg.save(cfg_path)
    export_dir = os.path.join(args.work, "export")
    if not os.path.isfile(os.path.join(export_dir, "train_trl.py")):
        export(load_config(cfg_path), export_dir, source=cfg_path)

    rows = []
    for seed in seeds:
        seed_cfg = load_config(cfg_path, {"seed": seed})
        ours_dir = os.path.join(args.work, f"sapo_lab-seed{seed}")
        t0 = time.perf_counter()
        _run([sys.executable, "-m", "sapo_lab", "train", "--config", cfg_path, "--output-dir", ours_dir, "--seed", str(seed)],
             ours_dir + ".log")
        with open(os.path.join(ours_dir, "summary.json")) as f:
            ours = json.load(f)
        ours_total = time.perf_counter() - t0

        trl_dir = os.path.join(args.work, f"trl-seed{seed}")
        t0 = time.perf_counter()
        _run([sys.executable, os.path.join(export_dir, "train_trl.py"), "--output-dir", trl_dir, "--seed", str(seed), "--cpu"],
             trl_dir + ".log")
        trl_total = time.perf_counter() - t0
        with open(os.path.join(trl_dir, "trl_summary.json")) as f:
            theirs = json.load(f)
        # The same evaluator and seeds as sapo_lab train's summary (cold: offset 0, final: offset 1).
        cold_model, tok = load_model_and_tokenizer(cold_dir)
        verify = task_for(seed_cfg).verify
        cold = held_out_eval(cold_model.eval(), tok, seed_cfg, splits["eval"], verify)
        final_model, tok = load_model_and_tokenizer(theirs["final_model"])
        final = held_out_eval(final_model.eval(), tok, seed_cfg, splits["eval"], verify, seed=final_eval_seed(seed))
        assert abs(cold["pass1"] - ours["cold_start_pass1"]) < 1e-12, "cold starts differ"
        row = {
            "seed": seed,
            "cold_pass1": cold["pass1"],
            "sapo_lab_final_pass1": ours["final_pass1"], "sapo_lab_final_ci95": ours["final_pass1_ci95"],
            "sapo_lab_gain": ours["pass1_gain"], "sapo_lab_train_s": ours["train_wall_s"], "sapo_lab_total_s": ours_total,
            "sapo_lab_dev_eval_s": dev_eval_seconds(ours_dir),
            "trl_final_pass1": final["pass1"], "trl_final_ci95": final["pass1_ci95"],
            "trl_gain": final["pass1"] - cold["pass1"], "trl_train_s": theirs["train_wall_s"], "trl_total_s": trl_total,
            "trl_optimizer_steps": theirs["optimizer_steps"], "sapo_lab_steps": ours["steps"],
        }
        rows.append(row)
        print(
            f"seed {seed}: cold {100 * cold['pass1']:.1f} | sapo_lab {100 * row['sapo_lab_final_pass1']:.1f} "
            f"({100 * row['sapo_lab_gain']:+.1f}, {row['sapo_lab_train_s']:.0f} s) | TRL {100 * row['trl_final_pass1']:.1f} "
            f"({100 * row['trl_gain']:+.1f}, {row['trl_train_s']:.0f} s)",
            flush=True,
        )
    summary = {
        "config": args.config, "max_steps": args.max_steps, "seeds": seeds, "rows": rows,
        "sapo_lab_gain_mean_ci95": mean_ci([r["sapo_lab_gain"] for r in rows]),
        "trl_gain_mean_ci95": mean_ci([r["trl_gain"] for r in rows]),
        "sapo_lab_train_s_mean": sum(r["sapo_lab_train_s"] for r in rows) / len(rows),
        "trl_train_s_mean": sum(r["trl_train_s"] for r in rows) / len(rows),
        "torch_threads": torch.get_num_threads(),
    }
    with open(os.path.join(args.work, "parity.json"), "w") as f:
        json.dump(summary, f, indent=2)
    a, b = summary["sapo_lab_gain_mean_ci95"], summary["trl_gain_mean_ci95"]
    print(f"mean gain sapo_lab {100 * a[0]:+.1f} [{100 * a[1]:.1f}, {100 * a[2]:.1f}]; "
          f"TRL {100 * b[0]:+.1f} [{100 * b[1]:.1f}, {100 * b[2]:.1f}] (95% t interval over seeds)")
    print(f"mean_gain_sapo_lab={a[0]:.4f} mean_gain_trl={b[0]:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
