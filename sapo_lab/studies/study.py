"""Studies: every (method, grid point, seed) of a declared experiment, resumable, with one summary.

A study file (``experiments/NAME.json``) is written before anything runs::

    {
      "name": "main_comparison",            # results go to RESULTS_ROOT/NAME/
      "description": "what it asks, and its measured compute",
      "preset": "cpu-tiny",                  # as for load_config
      "base": {"rollout.max_completion_length": 5},        # overrides for every run
      "methods": {"sapo": {"loss_type": "sapo"}, "grpo": {"loss_type": "grpo"}},
      "seeds": [0, 1, 2],
      "grid": {"optimization.learning_rate": [1e-4, 3e-4]}, # optional; cartesian product
      "budget": {"max_steps": 60, "max_train_time_s": 0},   # the same for every run
      "collapse": [{"metric": "dev_pass1", "kind": "drop_from_best", "fraction": 0.5, "patience": 2}],
      "selection": [{"by": "best_dev"}, {"by": "final"}],   # checkpoints evaluated on eval
      "snapshot_every": "dev",               # weights kept at every dev step ("dev", N steps, or 0)
      "breakdown_samples": 4,                # samples per eval prompt for the per-family table
      "analysis": {...}                      # optional: the primary endpoint, comparisons and test
    }

The ``analysis`` block declares how the study is read: ``declared`` ("before running", or
"post hoc" for a plan written after the results), ``declared_utc``, the primary ``endpoint``
(``metric``: a column of ``summary.csv``; ``checkpoint``; ``evaluation``: the protocol in
words), ``alpha``, the primary ``tests`` (each ``{"id", "question", "method", "reference",
"cell", "test", "family"?}``: ``method - reference`` at matched seeds in the grid ``cell``;
tests sharing a ``family`` are Holm-adjusted together), optional ``tuning`` arms (each
``{"id", "question", "arms": {NAME: [methods]}, "tune_on", "test"}``: per arm, the method
with the best seed-mean ``tune_on`` is chosen, then the chosen methods are compared paired
by seed on the endpoint) and ``exploratory`` (what everything else is). Once a study has run
with an analysis block, the block is part of its declaration and cannot change; a study that
ran without one may gain a post hoc block.

Override keys are those of :func:`sapo_lab.training.config.load_config` (dotted or unique leaf
names). A method or grid point may not set the budget or the seed (that would make the
comparison unequal), and a key may not be set by both a method and the grid.

``run_study`` writes ``RESULTS_ROOT/NAME/``: ``study.json`` (the declaration),
``runs/RUN_ID/`` (the trainer's run directory: resolved ``config.json``, per-step
``metrics.jsonl``, ``summary.json``; plus ``study_record.json`` with the collapse verdict,
the selected checkpoints and their per-family eval breakdown), ``summary.csv`` and
``summary.json`` (one row per run), and ``environment.json`` (per invocation: sapo_lab
version, git commit, hardware, date, wall time). Checkpoints, snapshots and model
weights are listed in a ``.gitignore`` there, so ``git add results/NAME`` commits the
numbers, not the weights.

Rerunning the same study skips finished runs (``summary.json``, or ``diverged.json`` for
a run stopped by :class:`sapo_lab.training.trainer.TrainingDiverged`), resumes interrupted ones
from their checkpoint (exactly, as the trainer guarantees), and restarts runs that died
before their first checkpoint. A run whose saved config differs from what the study file
now resolves to is an error: a changed study needs a new name.

Collapse criteria (written before running; a run collapses when any fires; divergence
always counts as collapse), each over the rows where ``metric`` is not null:

* ``drop_from_best``: ``metric < fraction * (best so far)`` for ``patience`` consecutive
  measurements, counted only once the best so far is at least ``min_best`` (default 0);
* ``below`` / ``above``: ``metric < threshold`` (``> threshold``) for ``patience``
  consecutive measurements.

The step reported is the measurement at which the criterion fired.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

from ..tasks import task_for
from .results import value_tag

STUDY_KEYS = {
    "name",
    "description",
    "preset",
    "base",
    "methods",
    "seeds",
    "grid",
    "budget",
    "collapse",
    "selection",
    "snapshot_every",
    "breakdown_samples",
    "analysis",
}
ANALYSIS_KEYS = {"declared", "declared_utc", "endpoint", "alpha", "tests", "tuning", "exploratory"}
DECLARED = ("before running", "post hoc")
TESTS = ("paired_t",)
BUDGET_KEYS = {"max_steps": "optimization.max_steps", "max_train_time_s": "max_train_time_s"}
COLLAPSE_KINDS = ("drop_from_best", "below", "above")
GITIGNORE = "runs/*/checkpoints/\nruns/*/snapshots/\nruns/*/cold_start/\nruns/*/final_model/\n_coldstart/\n*.tmp\n"


# ---------------------------------------------------------------- the declaration


def load_study(path: str) -> dict:
    """The study declaration at ``path``, checked; unknown keys and bad values are one-line errors."""
    if not os.path.isfile(path):
        raise ValueError(f"study file {path!r} does not exist")
    try:
        with open(path) as f:
            study = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"study file {path!r} is not valid JSON: {exc}") from None
    if not isinstance(study, dict):
        raise ValueError(f"study file {path!r} must hold a JSON object")
    unknown = sorted(set(study) - STUDY_KEYS)
    if unknown:
        raise ValueError(f"unknown study key {unknown[0]!r}; known: {sorted(STUDY_KEYS)}")
    for key in ("name", "methods", "seeds", "budget", "collapse"):
        if key not in study:
            raise ValueError(f"study {path!r} must declare {key!r}")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", str(study["name"])):
        raise ValueError(f"study name {study['name']!r} must be letters, digits, '_', '.', '-'")
    study.setdefault("preset", "cpu-tiny")
    study.setdefault("base", {})
    study.setdefault("grid", {})
    study.setdefault("selection", [{"by": "best_dev"}, {"by": "final"}])
    study.setdefault("snapshot_every", "dev")
    study.setdefault("breakdown_samples", 4)
    if not isinstance(study["methods"], dict) or not study["methods"]:
        raise ValueError("study 'methods' must map method names to override objects")
    for m, ov in study["methods"].items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", m) or not isinstance(ov, dict):
            raise ValueError(f"method {m!r}: names are letters, digits, '_', '.', '-', and overrides an object")
    seeds = study["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"study 'seeds' must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"study 'seeds' repeats a seed: {seeds}")
    grid = study["grid"]
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ValueError("study 'grid' must map override keys to non-empty lists of values")
    budget = study["budget"]
    if not isinstance(budget, dict) or "max_steps" not in budget or set(budget) - set(BUDGET_KEYS):
        raise ValueError(f"study 'budget' must give max_steps (and optionally max_train_time_s), got {budget!r}")
    _check_collapse(study["collapse"])
    from .checkpoint_rules import RULES

    for rule in study["selection"]:
        if not isinstance(rule, dict) or rule.get("by") not in RULES or set(rule) - {"by", "value", "saved_only"}:
            raise ValueError(f"selection rule {rule!r} must be {{'by': one of {RULES}, 'value'?: number, 'saved_only'?: bool}}")
        needs_value = rule["by"] not in ("best_dev", "final")
        value = rule.get("value")
        if needs_value != (value is not None) or (needs_value and not isinstance(value, (int, float))):
            raise ValueError(f"selection rule {rule!r}: {'a numeric value is' if needs_value else 'no value is'} needed")
    snap = study["snapshot_every"]
    if snap != "dev" and not (isinstance(snap, int) and not isinstance(snap, bool) and snap >= 0):
        raise ValueError(f"snapshot_every must be 'dev' or an integer >= 0, got {snap!r}")
    if not isinstance(study["breakdown_samples"], int) or study["breakdown_samples"] < 0:
        raise ValueError("breakdown_samples must be an integer >= 0 (0 = no per-family evaluation)")
    if "analysis" in study:
        _check_analysis(study["analysis"], study)
    return study


def _check_analysis(plan, study: dict) -> None:
    """The analysis block names known methods, one declared test, and says when it was declared."""
    if not isinstance(plan, dict):
        raise ValueError("study 'analysis' must be an object")
    unknown = sorted(set(plan) - ANALYSIS_KEYS)
    if unknown:
        raise ValueError(f"unknown analysis key {unknown[0]!r}; known: {sorted(ANALYSIS_KEYS)}")
    for key in ("declared", "declared_utc", "endpoint", "alpha", "tests"):
        if key not in plan:
            raise ValueError(f"study 'analysis' must give {key!r}")
    if plan["declared"] not in DECLARED:
        raise ValueError(f"analysis 'declared' must be one of {DECLARED}, got {plan['declared']!r}")
    endpoint = plan["endpoint"]
    if not isinstance(endpoint, dict) or set(endpoint) != {"metric", "checkpoint", "evaluation"}:
        raise ValueError("analysis 'endpoint' must give exactly 'metric', 'checkpoint' and 'evaluation'")
    if not isinstance(plan["alpha"], float) or not 0 < plan["alpha"] < 1:
        raise ValueError(f"analysis 'alpha' must be a number in (0, 1), got {plan['alpha']!r}")
    methods = set(study["methods"])
    grid_leaves = {_leaf(k) for k in study.get("grid", {})} | set(study.get("grid", {}))
    ids = set()
    for t in plan["tests"]:
        if not isinstance(t, dict) or not {"id", "question", "method", "reference", "test"} <= set(t):
            raise ValueError(f"analysis test {t!r} needs 'id', 'question', 'method', 'reference' and 'test'")
        for side in ("method", "reference"):
            if t[side] not in methods:
                raise ValueError(f"analysis test {t['id']}: {side} {t[side]!r} is not a method of the study")
        if t["test"] not in TESTS:
            raise ValueError(f"analysis test {t['id']}: test must be one of {TESTS}, got {t['test']!r}")
        if set(t.get("cell", {})) - grid_leaves:
            raise ValueError(f"analysis test {t['id']}: cell key {sorted(set(t['cell']) - grid_leaves)[0]!r} is not a grid key")
        ids.add(t["id"])
    for arm in plan.get("tuning", []):
        if not isinstance(arm, dict) or not {"id", "question", "arms", "tune_on", "test"} <= set(arm):
            raise ValueError(f"analysis tuning {arm!r} needs 'id', 'question', 'arms', 'tune_on' and 'test'")
        if len(arm["arms"]) != 2 or len({len(v) for v in arm["arms"].values()}) != 1:
            raise ValueError(f"analysis tuning {arm['id']}: two arms with the same number of configurations")
        for name in (m for v in arm["arms"].values() for m in v):
            if name not in methods:
                raise ValueError(f"analysis tuning {arm['id']}: {name!r} is not a method of the study")
        ids.add(arm["id"])
    if len(ids) != len(plan["tests"]) + len(plan.get("tuning", [])):
        raise ValueError("analysis test and tuning ids must be unique")


def _check_collapse(criteria) -> None:
    if not isinstance(criteria, list) or not criteria:
        raise ValueError("study 'collapse' must be a non-empty list of criteria, declared before running")
    for c in criteria:
        if not isinstance(c, dict) or c.get("kind") not in COLLAPSE_KINDS or not isinstance(c.get("metric"), str):
            raise ValueError(f"collapse criterion {c!r} needs 'metric' and 'kind' in {COLLAPSE_KINDS}")
        allowed = {"metric", "kind", "patience"} | (
            {"fraction", "min_best"} if c["kind"] == "drop_from_best" else {"threshold"}
        )
        if set(c) - allowed:
            raise ValueError(f"collapse criterion {c!r}: unknown key {sorted(set(c) - allowed)[0]!r}")
        need = "fraction" if c["kind"] == "drop_from_best" else "threshold"
        if not isinstance(c.get(need), (int, float)):
            raise ValueError(f"collapse criterion {c!r} needs a numeric {need!r}")
        if not isinstance(c.get("patience", 1), int) or c.get("patience", 1) < 1:
            raise ValueError(f"collapse criterion {c!r}: patience must be an integer >= 1")


def _leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def expand_runs(study: dict, results_root: str = "results") -> list[dict]:
    """Every run of the study, in a fixed order: ``{"run_id", "method", "seed", "grid", "overrides", "config"}``.

    Every config is resolved and validated here, before any run starts.
    """
    from ..training.config import load_config, resolve_key

    budget_keys = {resolve_key(k) for k in BUDGET_KEYS.values()} | {resolve_key("seed")}
    grid = study["grid"]
    grid_keys = [resolve_key(k) for k in grid]
    for m, ov in study["methods"].items():
        keys = {resolve_key(k) for k in ov}
        if keys & budget_keys:
            raise ValueError(f"method {m!r} sets {sorted(keys & budget_keys)[0]!r}: the budget and seeds are the study's")
        if keys & set(grid_keys):
            raise ValueError(f"method {m!r} and the grid both set {sorted(keys & set(grid_keys))[0]!r}")
    if set(grid_keys) & budget_keys:
        raise ValueError(f"the grid sets {sorted(set(grid_keys) & budget_keys)[0]!r}: the budget and seeds are the study's")
    base = dict(study["base"])
    if {resolve_key(k) for k in base} & budget_keys:
        raise ValueError(f"'base' sets {sorted({resolve_key(k) for k in base} & budget_keys)[0]!r}: use 'budget' and 'seeds'")
    if not any(resolve_key(k) == "cold_start.cache_dir" for k in base):  # one cold start per seed, shared by the methods
        base["cold_start.cache_dir"] = os.path.join(results_root, study["name"], "_coldstart")
    runs = []
    for method, ov in study["methods"].items():
        for point in itertools.product(*grid.values()) if grid else [()]:
            g = dict(zip(grid, point, strict=True))
            for seed in study["seeds"]:
                # max_train_time_s is always set: a preset's wall-clock guard must not cut runs unannounced
                budget = {BUDGET_KEYS[k]: v for k, v in {"max_train_time_s": 0, **study["budget"]}.items()}
                overrides = {**base, **ov, **g, **budget, "seed": seed}
                label = "".join(f"_{_leaf(k)}={value_tag(v)}" for k, v in g.items())
                runs.append(
                    {
                        "run_id": f"{method}{label}_seed{seed}",
                        "method": method,
                        "seed": seed,
                        "grid": g,
                        "overrides": overrides,
                        "config": load_config(study["preset"], overrides),
                    }
                )
    return runs


# ---------------------------------------------------------------- verdicts


def collapse_verdict(rows: list[dict], criteria: list[dict], diverged_at: int | None = None) -> dict:
    """``{"collapsed", "step", "criterion", "reason"}``: the earliest criterion to fire."""
    fired = []
    for i, c in enumerate(criteria):
        patience, run, best = c.get("patience", 1), 0, None
        for r in rows:
            v = r.get(c["metric"])
            if v is None:
                continue
            if c["kind"] == "drop_from_best":
                best = v if best is None else max(best, v)
                bad = best >= c.get("min_best", 0.0) and v < c["fraction"] * best
            elif c["kind"] == "below":
                bad = v < c["threshold"]
            else:
                bad = v > c["threshold"]
            run = run + 1 if bad else 0
            if run >= patience:
                fired.append((r["step"], i, f"{c['metric']} {c['kind']} for {patience} measurement(s)"))
                break
    if diverged_at is not None:
        fired.append((diverged_at, None, "training diverged (NaN/inf)"))
    if not fired:
        return {"collapsed": False, "step": None, "criterion": None, "reason": None}
    step, i, why = min(fired, key=lambda f: f[0])
    return {"collapsed": True, "step": step, "criterion": i, "reason": why}


def task_weights(task) -> dict:
    """Declared aggregate weights: the mix's own, else the single task at weight 1."""
    return dict(task.weights) if hasattr(task, "weights") else {task.name: 1.0}


def evaluate_selected(run_dir: str, cfg, rule: dict, num_samples: int) -> dict:
    """The selection rule's choice and, when its weights exist, the per-family eval breakdown."""
    from .checkpoint_rules import CheckpointMissing, load_weights, select_checkpoint
    from .per_family import breakdown, score_problems

    try:
        choice = select_checkpoint(run_dir, rule["by"], rule.get("value"), saved_only=rule.get("saved_only", False))
    except CheckpointMissing as exc:
        return {**rule, "error": str(exc)}
    if num_samples == 0:
        return choice
    task = task_for(cfg)
    t = cfg.task
    problems = task.make_splits(t.split_seed, t.num_train, t.num_dev, t.num_eval)["eval"]
    model, tok = load_weights(run_dir, choice["step"])
    temperature = cfg.rollout.temperature if cfg.evaluation.eval_temperature is None else cfg.evaluation.eval_temperature
    records = score_problems(
        model,
        tok,
        task,
        problems,
        num_samples=num_samples,
        temperature=temperature,
        max_completion_length=cfg.rollout.max_completion_length,
        # the trainer's final-eval seed: every selected checkpoint is scored with the same random
        # numbers, and at the final step with num_samples equal to evaluation.num_samples this
        # reproduces summary.json's final_pass1 exactly (with fewer samples it is another protocol)
        seed=cfg.seed * 7919 + 1,
    )
    choice["eval"] = breakdown(records, task_weights(task), pass_k=sorted({1, num_samples}))
    return choice


# ---------------------------------------------------------------- running


def _same_config(run_dir: str, cfg) -> bool:
    """The run's saved config equals ``cfg`` (where the cold-start cache lives does not count)."""
    with open(os.path.join(run_dir, "config.json")) as f:
        saved = json.load(f)
    now = json.loads(json.dumps(cfg.to_dict()))
    for d in (saved, now):
        d.get("cold_start", {}).pop("cache_dir", None)
    return saved == now


def kernel_fingerprint() -> str:
    """A hash of the exact bits of one cpu-tiny forward and backward pass on this machine.

    CPUs with other vector units (AVX-512 or not) run other matmul kernels, whose float
    results differ in the last bits; over a cold start's hundreds of updates that changes
    sampled tokens. Runs reproduce bit for bit only where this fingerprint matches.
    """
    import hashlib

    import torch

    from ..training.model import build_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # runs train on one thread; a second one sums in another order
    try:
        with torch.random.fork_rng():
            model = build_model("cpu-tiny", seed=0)
            ids = torch.arange(64).remainder(model.config.vocab_size).reshape(4, 16)
            logits = model(ids, attention_mask=torch.ones_like(ids)).logits.float()
            logits.logsumexp(-1).sum().backward()
    finally:
        torch.set_num_threads(threads)
    digest = hashlib.sha256(logits.detach().numpy().tobytes())
    for p in model.parameters():
        digest.update(p.grad.numpy().tobytes())
    return digest.hexdigest()[:16]


def _environment() -> dict:
    import torch

    from .._version import __version__

    here = os.path.dirname(os.path.abspath(__file__))

    def git(*args):  # the commit of the sapo_lab that runs, wherever the study is started from
        try:
            out = subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=10)
            return out.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    import transformers

    return {
        "sapo_lab_version": __version__,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "kernel_fingerprint": kernel_fingerprint(),
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "argv": sys.argv,
    }


def _write_json(path: str, obj) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def run_status(run_dir: str) -> str:
    """``done`` (summary.json or diverged.json), ``partial`` (a checkpoint), ``pending`` (nothing to resume)."""
    from ..training.checkpoint import latest_checkpoint

    if os.path.isfile(os.path.join(run_dir, "summary.json")) or os.path.isfile(os.path.join(run_dir, "diverged.json")):
        return "done"
    if os.path.isdir(run_dir) and latest_checkpoint(run_dir) is not None:
        return "partial"
    return "pending"


def _snapshot_callback(run_dir: str, every, user_callback):
    from .checkpoint_rules import save_snapshot

    def on_step_end(trainer, row):
        at_dev = every == "dev" and row.get("dev_pass1") is not None
        if at_dev or (isinstance(every, int) and every and row["step"] % every == 0):
            save_snapshot(run_dir, row["step"], trainer.model)
        if user_callback is not None:
            user_callback(trainer, row)

    return on_step_end


def finish_record(run: dict, run_dir: str, study: dict) -> dict:
    """Collapse verdict, selections with their eval breakdown, counters: ``study_record.json``."""
    from .checkpoint_rules import read_metrics

    path = os.path.join(run_dir, "study_record.json")
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    rows = read_metrics(run_dir)
    diverged = None
    if os.path.isfile(os.path.join(run_dir, "diverged.json")):
        with open(os.path.join(run_dir, "diverged.json")) as f:
            diverged = json.load(f)
        summary = {"status": "diverged", "steps": diverged["step"]}
    else:
        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
    last = rows[-1] if rows else {}
    record = {
        "run_id": run["run_id"],
        "method": run["method"],
        "seed": run["seed"],
        "grid": run["grid"],
        "status": summary["status"],
        "steps": summary["steps"],
        "collapse": collapse_verdict(rows, study["collapse"], diverged["step"] if diverged else None),
        "cold_start_pass1": summary.get("cold_start_pass1"),
        "final_pass1": summary.get("final_pass1"),
        "final_pass1_ci95": summary.get("final_pass1_ci95"),
        # the trainer's counters, cumulative over the run's rollout steps
        "rollout_tokens": last.get("total_tokens_generated", 0),
        "update_tokens": last.get("total_tokens_trained", 0),
        "optimizer_steps": last.get("total_optimizer_steps", 0),
        "verifier_calls": last.get("total_verifier_calls", 0),
        "train_elapsed_s": last.get("elapsed_s", 0.0),
        "selections": [],
    }
    if not diverged:
        for rule in study["selection"]:
            record["selections"].append(evaluate_selected(run_dir, run["config"], rule, study["breakdown_samples"]))
    _write_json(path, record)
    return record


def _run_all(runs, out, study, actions, shard, log, progress, on_step_end) -> str:
    """Train or skip each run of this shard; returns ``completed`` or ``interrupted``."""
    from ..training.trainer import TrainingDiverged, train

    i, n = shard
    for k, run in enumerate(runs):
        if k % n != i:
            continue
        run_dir = os.path.join(out, "runs", run["run_id"])
        cfg = run["config"]
        state = run_status(run_dir)
        if state != "pending" and not _same_config(run_dir, cfg):
            raise ValueError(f"run {run['run_id']} was started with another config; the study changed: use a new name")
        if state == "done":
            actions[run["run_id"]] = "skipped"
            finish_record(run, run_dir, study)
            continue
        if state == "pending" and os.path.isdir(run_dir):
            shutil.rmtree(run_dir)  # died before its first checkpoint: nothing to resume
        actions[run["run_id"]] = "resumed" if state == "partial" else "started"
        log(f"study {study['name']}: {actions[run['run_id']]} {run['run_id']} ({k + 1}/{len(runs)})")
        t_run = time.perf_counter()
        callback = _snapshot_callback(run_dir, study["snapshot_every"], on_step_end)
        try:
            summary = train(cfg, run_dir, resume=state == "partial", log=log, progress=progress, on_step_end=callback)
        except TrainingDiverged as exc:
            from .checkpoint_rules import read_metrics

            rows = read_metrics(run_dir)
            _write_json(os.path.join(run_dir, "diverged.json"), {"error": str(exc), "step": rows[-1]["step"] + 1 if rows else 1})
            summary = {"status": "diverged"}
        finally:  # a crashed invocation's time still counts
            _append_wall(run_dir, actions[run["run_id"]], time.perf_counter() - t_run)
        if summary["status"] == "interrupted":
            return "interrupted"
        finish_record(run, run_dir, study)
    return "completed"


def run_study(
    path: str,
    results_root: str = "results",
    *,
    log=print,
    progress: bool | None = None,
    on_step_end=None,
    shard: tuple[int, int] = (0, 1),
    methods: list[str] | None = None,
) -> dict:
    """Run (or continue) every run of the study at ``path``; returns ``{"status", "rows", "actions"}``.

    ``shard=(i, n)`` runs only runs ``i, i+n, ...`` (several processes can share a study);
    the summary covers every finished run. ``methods`` restricts this invocation to those
    methods' runs (a declared priority order: primary comparisons first); the shard index
    counts within them. ``on_step_end(trainer, row)`` is passed to each
    run's trainer (tests interrupt through it).
    """
    study = load_study(path)
    out = os.path.join(results_root, study["name"])
    runs = expand_runs(study, results_root)
    unknown = sorted(set(methods or []) - set(study["methods"]))
    if unknown:
        raise ValueError(f"--methods: {unknown[0]!r} is not a method of study {study['name']!r}; it has {list(study['methods'])}")
    todo = [r for r in runs if methods is None or r["method"] in methods]
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    with open(os.path.join(out, ".gitignore"), "w") as f:
        f.write(GITIGNORE)
    declared = os.path.join(out, "study.json")
    if os.path.isfile(declared):
        with open(declared) as f:
            saved = json.load(f)
        if "analysis" not in saved:  # a study run without a plan may gain a post hoc one
            saved = {**saved, **({"analysis": study["analysis"]} if "analysis" in study else {})}
        if saved != study:
            raise ValueError(f"{declared} holds a different declaration of study {study['name']!r}; use a new name")
    _write_json(declared, study)
    env = {"started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **_environment()}
    t0 = time.perf_counter()
    actions: dict[str, str] = {}
    status = "crashed"  # until the loop ends normally; recorded either way
    try:
        status = _run_all(todo, out, study, actions, shard, log, progress, on_step_end)
    finally:
        env["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        env["wall_s"] = time.perf_counter() - t0
        env["status"] = status
        env["actions"] = actions
        env_path = os.path.join(out, "environment.json")
        history = []
        if os.path.isfile(env_path):
            with open(env_path) as f:
                history = json.load(f)["invocations"]
        _write_json(env_path, {"invocations": history + [env]})
    rows = write_summary(out, runs, study)
    return {"status": status, "rows": rows, "actions": actions, "results": out}


def _append_wall(run_dir: str, action: str, wall_s: float) -> None:
    path = os.path.join(run_dir, "study_wall.json")
    hist = []
    if os.path.isfile(path):
        with open(path) as f:
            hist = json.load(f)
    _write_json(path, hist + [{"action": action, "wall_s": wall_s}])


def _flat_row(record: dict, wall: float) -> dict:
    row = {
        "run_id": record["run_id"],
        "method": record["method"],
        "seed": record["seed"],
        **{_leaf(k): v for k, v in record["grid"].items()},
        "status": record["status"],
        "steps": record["steps"],
        "collapsed": record["collapse"]["collapsed"],
        "collapse_step": record["collapse"]["step"],
        "collapse_reason": record["collapse"]["reason"],
        "cold_start_pass1": record["cold_start_pass1"],
        "final_pass1": record["final_pass1"],
        "final_pass1_lo": (record["final_pass1_ci95"] or [None, None])[0],
        "final_pass1_hi": (record["final_pass1_ci95"] or [None, None])[1],
    }
    for sel in record["selections"]:
        tag = sel["by"] + (f"_{value_tag(sel['value'])}" if sel.get("value") is not None else "")
        row[f"{tag}_step"] = sel.get("step")
        row[f"{tag}_dev_pass1"] = sel.get("dev_pass1")
        ev = sel.get("eval")
        row[f"{tag}_eval_pass1"] = ev["weighted"]["pass1"] if ev else None
        if ev:
            for fam, cell in ev["by_family"].items():
                row[f"{tag}_eval_pass1_{fam}"] = cell["pass1"]
        row[f"{tag}_error"] = sel.get("error")
    for key in ("rollout_tokens", "update_tokens", "optimizer_steps", "verifier_calls", "train_elapsed_s"):
        row[key] = record[key]
    row["run_wall_s"] = wall
    return row


def write_summary(out: str, runs: list[dict], study: dict) -> list[dict]:
    """``summary.csv`` / ``summary.json``: one row per finished run, in declaration order."""
    rows = []
    for run in runs:
        run_dir = os.path.join(out, "runs", run["run_id"])
        rec_path = os.path.join(run_dir, "study_record.json")
        if not os.path.isfile(rec_path):
            continue
        with open(rec_path) as f:
            record = json.load(f)
        wall = 0.0
        if os.path.isfile(os.path.join(run_dir, "study_wall.json")):
            with open(os.path.join(run_dir, "study_wall.json")) as f:
                wall = sum(h["wall_s"] for h in json.load(f))
        rows.append(_flat_row(record, wall))
    _write_json(os.path.join(out, "summary.json"), rows)
    fields = list(dict.fromkeys(k for r in rows for k in r))
    tmp = os.path.join(out, "summary.csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, os.path.join(out, "summary.csv"))
    return rows


# ---------------------------------------------------------------- command line


def main_study(argv: list[str] | None = None) -> int:
    """``python -m sapo_lab study experiments/NAME.json [--results-root results] [--shard I/N] [--list]``."""
    parser = argparse.ArgumentParser(prog="python -m sapo_lab study", description="Run or continue a declared study.")
    parser.add_argument("study", help="study file, e.g. experiments/main_comparison.json")
    parser.add_argument("--results-root", default="results")
    parser.add_argument("--shard", default="0/1", help="I/N: run only every N-th run starting at I (parallel processes)")
    parser.add_argument("--methods", default=None, help="comma-separated: run only these methods' runs (e.g. primary first)")
    parser.add_argument("--list", action="store_true", help="list the runs and their status; run nothing")
    parser.add_argument("--no-progress", action="store_true")

    def fail(message):
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = fail
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        m = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if not m or not int(m[1]) < int(m[2]):
            raise ValueError(f"--shard must be I/N with 0 <= I < N, got {args.shard!r}")
        if args.list:
            study = load_study(args.study)
            for run in expand_runs(study, args.results_root):
                run_dir = os.path.join(args.results_root, study["name"], "runs", run["run_id"])
                print(f"{run_status(run_dir):<8} {run['run_id']}")
            return 0
        res = run_study(
            args.study,
            args.results_root,
            log=lambda msg: print(msg, file=sys.stderr, flush=True),
            progress=False if args.no_progress else None,
            shard=(int(m[1]), int(m[2])),
            methods=args.methods.split(",") if args.methods else None,
        )
    except ValueError as exc:
        if os.environ.get("SAPO_LAB_DEBUG"):
            raise
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"{res['status']}: {len(res['rows'])} finished runs; summary: {os.path.join(res['results'], 'summary.csv')}")
    return 130 if res["status"] == "interrupted" else 0
