"""What ``train`` may do with a folder: fresh start, overwrite or resume.

:func:`prepare` is called before a run touches its output folder. It classifies the
folder (:func:`classify`):

* ``empty``: missing or empty -> a fresh run starts;
* ``run``: only files a run writes (``config.json``, ``metrics.jsonl``, ``checkpoints/`` ...), and
  those a study writes beside them (``study_record.json`` ...);
* ``foreign``: anything else is in it (a user's ``notes.txt``, a ``config.json`` that is not
  a sapo_lab config).

A fresh start goes ahead only in an empty folder, or in a run folder of the *same*
config that was killed before its first checkpoint (rerunning it regenerates exactly
what was there). Anything else is refused with one line, unless ``overwrite``: then the
run's own files are removed (saying which) and foreign files are left where they are.

``--resume`` takes the saved ``config.json`` as the truth. Keys in :data:`RESUMABLE` may be
changed (training longer, a new time limit...); a requested change to any other key is
refused, naming the key, the saved value and the requested value. The checkpoint is
the newest one that verifies (:func:`sapo_lab.runs.checkpoint.select_checkpoint`); newer
damaged ones are moved aside to ``checkpoints/damaged-step-*`` (nothing is deleted) and
named in the log. ``metrics.jsonl`` loses its rows past the checkpoint step and a
half-written last line; a damaged line anywhere else is refused.

Every check runs before anything is written, so a refused command changes nothing on
disk. The changes a resume makes are applied by :meth:`Prepared.commit` once the
checkpoint has loaded. The folder's file names and its metrics reader are
:mod:`.run_folder`'s.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field

from .checkpoint import check_structure, checkpoint_dirs, checkpoint_step, latest_hint, select_checkpoint
from .config import PRESETS, TrainConfig, config_from_dict, resolve_key
from .config_paths import flatten_config
from .durable import move
from .manifest import MANIFEST, verify_manifest
from .run_folder import (
    CONFIG,
    RESUMABLE,
    RUN_FILES,
    RunDirError,
    RunFolder,
    is_kept,
    is_temporary,
    kept_summary_name,
)
from .study_folder import STUDY_RUN_FILES


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _tree_size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


# ---------------------------------------------------------------- classification


@dataclass
class RunDirState:
    """What :func:`classify` found in a folder."""

    path: str
    kind: str  # "empty" | "run" | "foreign"
    saved_config: TrainConfig | None = None
    config_problem: str | None = None  # why config.json is not a usable config
    finished: bool = False
    checkpoints: list = field(default_factory=list)  # [(step, path)], newest first
    foreign: list = field(default_factory=list)
    temporaries: list = field(default_factory=list)  # paths of half-written leftovers


def classify(run_dir: str) -> RunDirState:
    """Look at ``run_dir`` without changing it."""
    if not os.path.isdir(run_dir):
        if os.path.exists(run_dir):
            raise RunDirError(f"output directory {run_dir} is a file, not a folder")
        return RunDirState(run_dir, "empty")
    names = sorted(os.listdir(run_dir))
    if not names:
        return RunDirState(run_dir, "empty")
    st = RunDirState(run_dir, "run")
    for n in names:
        if is_temporary(n):
            st.temporaries.append(os.path.join(run_dir, n))
        elif n not in RUN_FILES + STUDY_RUN_FILES and not is_kept(n):
            st.foreign.append(n)
    folder = RunFolder(run_dir)
    ck_root = folder.checkpoints
    if os.path.isdir(ck_root):
        st.temporaries += [os.path.join(ck_root, n) for n in sorted(os.listdir(ck_root)) if is_temporary(n)]
    st.checkpoints = checkpoint_dirs(run_dir)
    st.finished = os.path.isfile(folder.summary)
    cfg_path = folder.config
    if os.path.isfile(cfg_path):
        try:
            with open(cfg_path) as f:
                st.saved_config = config_from_dict(json.load(f))
        except (ValueError, TypeError, AttributeError) as exc:
            st.config_problem = _one_line(exc).split(";")[0] or type(exc).__name__
    else:
        st.config_problem = "missing"
    if st.config_problem not in (None, "missing"):
        st.foreign.append(CONFIG)  # a config.json we cannot read is not ours to overwrite
    st.kind = "foreign" if st.foreign else "run"
    return st


def config_differences(saved: dict, requested: dict, keys=None) -> list[tuple[str, object, object]]:
    """``[(dotted key, saved, requested)]`` for the keys (all if None) whose values differ."""
    a, b = flatten_config(saved), flatten_config(requested)
    both = set(a) | set(b)
    # a key that names a mapping (task.options) stands for every key under it
    keys = sorted(both) if keys is None else sorted({k for key in keys for k in both if k == key
                                                     or k.startswith(key + ".")} | set(keys) & both)
    return [(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


def _describe(diffs, limit: int = 3) -> str:
    parts = [f"{k} (saved {s!r}, requested {r!r})" for k, s, r in diffs[:limit]]
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return ", ".join(parts) + more


# ---------------------------------------------------------------- prepare


@dataclass
class Prepared:
    """The outcome of :func:`prepare`: the config to run, the checkpoint to load (resume only)."""

    cfg: TrainConfig
    checkpoint: str | None
    run_dir: str
    log: object = print
    changes: list = field(default_factory=list)  # [(key, saved, requested)] allowed on resume
    damaged: list = field(default_factory=list)  # [(folder name, reason)] to move aside
    temporaries: list = field(default_factory=list)

    def commit(self, step: int) -> None:
        """Apply what the resume decided, once the checkpoint at ``step`` has loaded."""
        run, folder, log = self.run_dir, RunFolder(self.run_dir), self.log
        remove_temporaries(self.temporaries, log)
        for name, _reason in self.damaged:
            src = os.path.join(folder.checkpoints, name)
            dst = os.path.join(folder.checkpoints, f"damaged-{name}")
            if os.path.exists(dst):
                dst += f"-{int(time.time())}"
            move(src, dst)
            log(f"moved the damaged checkpoint aside to {dst}")
        folder.truncate_metrics(step, log=log)
        if self.changes:
            if os.path.isfile(folder.summary):  # the finished run's result stays on disk
                kept = folder.file(kept_summary_name(step))
                move(folder.summary, kept)
                log(f"kept the earlier summary as {kept}")
            folder.append_resume({"step": step, "changes": {k: [s, r] for k, s, r in self.changes}})
            folder.write_config(self.cfg)
        self.log(f"resumed {run} at step {step}")


def remove_temporaries(paths, log=print) -> None:
    """Delete half-written leftovers of killed runs, saying what and how much."""
    if not paths:
        return
    size = sum(_tree_size(p) for p in paths if os.path.exists(p))
    for p in paths:
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.remove(p)
    names = ", ".join(os.path.relpath(p, os.path.dirname(os.path.dirname(p))) for p in paths[:3])
    more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
    log(f"removed {len(paths)} half-written leftover(s) of a killed run ({names}{more}; {size / 1e6:.1f} MB)")


def _remove_run_files(st: RunDirState, log) -> None:
    removed, keep = [], [n for n in st.foreign if n not in RUN_FILES]  # a user's config.json is replaced, as asked
    for name in sorted(os.listdir(st.path)):
        p = os.path.join(st.path, name)
        if name in keep:
            continue
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        removed.append(name)
    kept = f"; kept {', '.join(keep)}" if keep else ""
    log(f"--overwrite: removed {', '.join(removed) or 'nothing'} from {st.path}{kept}")


def _resume_keys(keys) -> list[str] | None:
    if keys is None:
        return None
    return sorted({resolve_key(k) for k in keys})


def prepare(
    run_dir: str, cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False, resume_keys=None, log=print
) -> Prepared:
    """Decide what a run in ``run_dir`` may do (see the module docstring).

    ``resume_keys``: on resume, the config keys the user asked for explicitly (the CLI's
    ``--key value`` overrides); ``None`` compares every key of ``cfg`` with the saved config.
    """
    if resume and overwrite:
        raise RunDirError("--resume and --overwrite contradict each other; pass one")
    st = classify(run_dir)
    if resume:
        return _prepare_resume(st, cfg, resume_keys, log)
    if st.kind == "empty":
        return Prepared(cfg, None, run_dir, log)
    if overwrite:
        _remove_run_files(st, log)
        return Prepared(cfg, None, run_dir, log)
    hint = "; pass --overwrite to replace it or choose another --output-dir"
    if st.kind == "foreign":
        what = ", ".join(st.foreign[:4]) + (f" and {len(st.foreign) - 4} more" if len(st.foreign) > 4 else "")
        why = f"; config.json: {st.config_problem}" if CONFIG in st.foreign and st.config_problem else ""
        raise RunDirError(f"output directory {run_dir} is not empty and is not a sapo_lab run (found {what}{why}){hint}")
    if st.saved_config is None:  # run files but no config.json: another run's debris
        raise RunDirError(f"run directory {run_dir} already holds a run's files but no config.json{hint}")
    diffs = config_differences(st.saved_config.to_dict(), cfg.to_dict())
    if st.finished:
        raise RunDirError(f"run directory {run_dir} already holds a run (finished: summary.json){hint}")
    if diffs:
        raise RunDirError(f"run directory {run_dir} already holds a run of another config: {_describe(diffs)}{hint}")
    if st.checkpoints:
        name = os.path.basename(st.checkpoints[0][1])
        raise RunDirError(
            f"run directory {run_dir} already holds a run of this config stopped at {name}; "
            "pass --resume to continue it or --overwrite to start again"
        )
    log(f"{run_dir} holds this config's run, stopped before its first checkpoint: starting it again")
    remove_temporaries(st.temporaries, log)
    return Prepared(cfg, None, run_dir, log)


def _stopped_before_first_checkpoint(run: str) -> str:
    return (f"--resume: the run in {run} stopped before its first checkpoint (during its cold start or first steps), "
            "so there is nothing to continue: run the same command without --resume to start it again "
            "(a cold start that finished is read from its cache)")


def _prepare_resume(st: RunDirState, cfg: TrainConfig, resume_keys, log) -> Prepared:
    run = st.path
    if st.saved_config is None:
        if st.config_problem in (None, "missing"):
            raise RunDirError(f"--resume: {run} is not a run directory (no config.json)")
        raise RunDirError(f"--resume: {run}/config.json is not a usable config: {st.config_problem}")
    saved = st.saved_config
    folder = RunFolder(run)
    if not st.checkpoints and not os.path.exists(folder.cold_start_eval):
        raise RunDirError(_stopped_before_first_checkpoint(run))
    try:
        folder.read_cold_start_eval()
    except (OSError, ValueError) as exc:
        raise RunDirError(f"--resume: {folder.cold_start_eval} cannot be read ({_one_line(exc)})") from None
    cold = folder.cold_start
    if not os.path.isdir(cold):
        raise RunDirError(f"--resume: {cold} is missing")
    if os.path.isfile(os.path.join(cold, MANIFEST)):
        problem = verify_manifest(cold)
    else:
        problem = check_structure(cold, ("model.safetensors",))
    if problem:
        raise RunDirError(f"--resume: {cold}: {problem}")
    ckpt, skipped, verified = select_checkpoint(run)
    if ckpt is None:
        if skipped:
            reasons = "; ".join(f"{n}: {r}" for n, r in skipped)
            raise RunDirError(f"--resume: no checkpoint in {run}/checkpoints can be trusted ({reasons})")
        raise RunDirError(_stopped_before_first_checkpoint(run))
    step = checkpoint_step(ckpt)
    name, hint_problem = latest_hint(run)
    if hint_problem:
        log(f"ignoring damaged {run}/checkpoints/latest.json ({hint_problem}); the checkpoints were scanned instead")
    for n, reason in skipped:
        log(f"skipping checkpoint {n}: {reason}")
    if skipped:
        log(f"resuming from the newest checkpoint that verifies: {os.path.basename(ckpt)}")
    if not verified:
        log(
            f"checkpoint {os.path.basename(ckpt)} has no manifest.json (written by an older sapo_lab): "
            "its files parse, but their bytes cannot be checked"
        )
    # Resolve the requested changes against the saved config.
    diffs = config_differences(saved.to_dict(), cfg.to_dict(), _resume_keys(resume_keys))
    refused = [d for d in diffs if d[0] not in RESUMABLE]
    if refused:
        raise RunDirError(
            f"--resume cannot change {_describe(refused)}: the saved run used the first value "
            f"(resume may change only {', '.join(RESUMABLE)}); start a new run in another --output-dir"
        )
    data = saved.to_dict()
    for key, _s, requested in diffs:
        section, _, leaf = key.rpartition(".")
        (data[section] if section else data)[leaf] = requested
    new_cfg = config_from_dict(data)
    if new_cfg.optimization.max_steps < step:
        raise RunDirError(
            f"--resume: optimization.max_steps={new_cfg.optimization.max_steps} is below the checkpoint's step {step}"
        )
    folder.read_metrics()  # refuses a damaged middle line before anything is written
    for key, s, r in diffs:
        log(f"--resume changes {key}: {s!r} -> {r!r}")
    if any(k == "optimization.max_steps" for k, _, _ in diffs) and new_cfg.optimization.lr_scheduler_type not in (
        "constant",
        "constant_with_warmup",
    ):
        log(
            f"note: the {new_cfg.optimization.lr_scheduler_type} learning-rate schedule of the remaining steps "
            "follows the new max_steps, so this run differs from one started with it"
        )
    damaged = [(n, r) for n, r in skipped]
    return Prepared(new_cfg, ckpt, run, log, changes=diffs, damaged=damaged, temporaries=st.temporaries)


# ---------------------------------------------------------------- the keys a user asked for


def requested_keys(preset_or_file: str | None, overrides: dict) -> list[str]:
    """The config keys a user typed: the ``--key value`` overrides, plus every key the
    preset or JSON file sets when ``--config`` was given (``None``: it was not).

    On resume only these are compared with the saved config, so a plain ``--resume``
    does not "change" what the default preset would set.
    """
    keys = {resolve_key(k) for k in overrides}
    if preset_or_file is not None:
        if preset_or_file in PRESETS:
            data = PRESETS[preset_or_file]
        else:
            with open(preset_or_file) as f:  # load_config has already parsed it
                data = json.load(f)
        keys |= {resolve_key(k) for k in flatten_config(data)}
    return sorted(keys)
