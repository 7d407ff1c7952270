"""Running a study: every run of its declaration, resumable, then the summary.

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
"""

from __future__ import annotations

import datetime
import os
import shutil
import time

from ..runs.checkpoint import latest_checkpoint
from ..runs.identity import same_run
from ..runs.kernels import apply_kernel_setting
from ..runs.metric_names import DEV_PASS1
from ..runs.snapshots import run_metric_rows, save_snapshot
from ..runs.study_folder import StudyFolder, StudyRunFolder
from .environment import capture_environment
from .expansion import expand_runs
from .record import finish_record
from .spec import load_declaration
from .summary import write_summary


def run_status(run_dir: str) -> str:
    """``done`` (summary.json or diverged.json), ``partial`` (a checkpoint), ``pending`` (nothing to resume)."""
    folder = StudyRunFolder(run_dir)
    if os.path.isfile(folder.summary) or os.path.isfile(folder.diverged):
        return "done"
    if os.path.isdir(run_dir) and latest_checkpoint(run_dir) is not None:
        return "partial"
    return "pending"


def _same_config(run_dir: str, cfg) -> bool:
    """The run's saved config is ``cfg``'s run (where the cold-start cache lives does not count)."""
    folder = StudyRunFolder(run_dir)
    if not os.path.isfile(folder.config):
        raise ValueError(f"{run_dir} holds a checkpoint or a result but no config.json, so it cannot be "
                         "resumed or trusted: remove the folder and run the study again")
    return same_run(folder.read_config(), cfg.to_dict())


def _snapshot_callback(run_dir: str, every, user_callback):
    def on_step_end(trainer, row):
        at_dev = every == "dev" and row.get(DEV_PASS1) is not None
        if at_dev or (isinstance(every, int) and every and row["step"] % every == 0):
            save_snapshot(run_dir, row["step"], trainer.model)
        if user_callback is not None:
            user_callback(trainer, row)

    return on_step_end


def _run_all(runs, out, study, actions, shard, log, progress, on_step_end, on_run_end=None) -> str:
    """Train or skip each run of this shard; returns ``completed`` or ``interrupted``."""
    from ..training.trainer import TrainingDiverged, train

    i, n = shard
    for k, run in enumerate(runs):
        if k % n != i:
            continue
        folder = StudyFolder(out).run(run["run_id"])
        run_dir = folder.path
        cfg = run["config"]
        state = run_status(run_dir)
        if state != "pending" and not _same_config(run_dir, cfg):
            raise ValueError(f"run {run['run_id']} was started with another config; the study changed: use a new name")
        if state == "done":
            actions[run["run_id"]] = "skipped"
            finish_record(run, run_dir, study)
            if on_run_end is not None:
                on_run_end(run["run_id"], "skipped")
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
            rows = run_metric_rows(run_dir)
            folder.write_diverged(str(exc), rows[-1]["step"] + 1 if rows else 1)
            summary = {"status": "diverged"}
        finally:  # a crashed invocation's time still counts
            folder.append_wall(actions[run["run_id"]], time.perf_counter() - t_run)
        if summary["status"] == "interrupted":
            return "interrupted"
        finish_record(run, run_dir, study)
        if on_run_end is not None:
            on_run_end(run["run_id"], actions[run["run_id"]])
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
    run_ids: set[str] | None = None,
    on_run_end=None,
    kernels: str | None = None,
) -> dict:
    """Run (or continue) every run of the study at ``path``; returns ``{"status", "rows", "actions"}``.

    ``shard=(i, n)`` runs only runs ``i, i+n, ...`` (several processes can share a study);
    the summary covers every finished run. ``methods`` restricts this invocation to those
    methods' runs (a declared priority order: primary comparisons first); the shard index
    counts within them; ``run_ids`` restricts it further to those runs (a replicated question's).
    ``on_step_end(trainer, row)`` is passed to each run's trainer (tests interrupt through it);
    ``on_run_end(run_id, action)`` is called after each run this invocation visits (a progress bar).
    ``kernels`` replaces the declaration's kernel setting (a replication on other kernels; recorded in
    ``environment.json``).
    """
    study = load_declaration(path)
    apply_kernel_setting(kernels or study.get("kernels", "native"))  # refused once torch loaded with other kernels
    out = os.path.join(results_root, study["name"])
    runs = expand_runs(study, results_root)
    unknown = sorted(set(methods or []) - set(study["methods"]))
    if unknown:
        raise ValueError(f"--methods: {unknown[0]!r} is not a method of study {study['name']!r}; it has {list(study['methods'])}")
    todo = [r for r in runs if (methods is None or r["method"] in methods) and (run_ids is None or r["run_id"] in run_ids)]
    folder = StudyFolder(out)
    folder.start()
    declared = folder.declaration
    if os.path.isfile(declared):
        saved = folder.read_declaration()
        if "analysis" not in saved:  # a study run without a plan may gain a post hoc one
            saved = {**saved, **({"analysis": study["analysis"]} if "analysis" in study else {})}
        if saved != study:
            raise ValueError(f"{declared} holds a different declaration of study {study['name']!r}; use a new name")
    folder.write_declaration(study)
    env = {"started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **capture_environment()}
    t0 = time.perf_counter()
    actions: dict[str, str] = {}
    status = "crashed"  # until the loop ends normally; recorded either way
    try:
        status = _run_all(todo, out, study, actions, shard, log, progress, on_step_end, on_run_end)
    finally:
        env["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        env["wall_s"] = time.perf_counter() - t0
        env["status"] = status
        env["actions"] = actions
        folder.append_invocation(env)
    rows = write_summary(out, runs, study)
    return {"status": status, "rows": rows, "actions": actions, "results": out}

