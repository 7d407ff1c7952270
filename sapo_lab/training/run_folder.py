"""What a run directory holds, and what ``train`` may do with it.

:func:`prepare` is called before a run touches its output folder. It classifies the
folder (:func:`classify`):

* ``empty``: missing or empty -> a fresh run starts;
* ``run``: only files a run writes (``config.json``, ``metrics.jsonl``, ``checkpoints/`` ...);
* ``foreign``: anything else is in it (a user's ``notes.txt``, a ``config.json`` that is not
  a sapo_lab config).

A fresh start goes ahead only in an empty folder, or in a run folder of the *same*
config that was killed before its first checkpoint (rerunning it regenerates exactly
what was there). Anything else is refused with one line, unless ``overwrite``: then the
run's own files are removed (saying which) and foreign files are left where they are.

``--resume`` takes the saved ``config.json`` as the truth. Keys in :data:`RESUMABLE` may be
changed (training longer, a new time limit...); a requested change to any other key is
refused, naming the key, the saved value and the requested value. The checkpoint is
the newest one that verifies (:func:`sapo_lab.training.checkpoint.select_checkpoint`); newer
damaged ones are moved aside to ``checkpoints/damaged-step-*`` (nothing is deleted) and
named in the log. ``metrics.jsonl`` loses its rows past the checkpoint step and a
half-written last line; a damaged line anywhere else is refused.

Every check runs before anything is written, so a refused command changes nothing on
disk. The changes a resume makes are applied by :meth:`Prepared.commit` once the
checkpoint has loaded.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import time
from dataclasses import dataclass, field

from .checkpoint import (
    TMP_PREFIX,
    check_structure,
    checkpoint_dirs,
    fsync_dir,
    fsync_file,
    latest_hint,
    select_checkpoint,
    verify_manifest,
)
from .config import PRESETS, TrainConfig, config_from_dict, resolve_key


class RunDirError(ValueError):
    """A run directory that cannot be used as asked; the message is one line."""


# What a run writes into its folder; anything else there is the user's ("foreign").
RUN_FILES = (
    "config.json",
    "metrics.jsonl",
    "cold_start",
    "cold_start_eval.json",
    "checkpoints",
    "final_model",
    "summary.json",
    "resumes.jsonl",
)
# Leftovers of interrupted atomic writes, and the files resume itself sets aside.
TEMPORARY_PATTERNS = ("*.tmp", "*.tmp-*", "*.old-*")
KEPT_PATTERNS = ("summary.step-*.json",)

# Keys ``--resume`` may change, and why that is safe. All others are refused.
RESUMABLE = {
    "optimization.max_steps": "train longer (or stop earlier), never below the checkpoint's step",
    "max_train_time_s": "a new wall-clock limit for the rest of the run",
    "save_steps": "how often checkpoints are written; changes no number",
    "threads": "CPU threads; changes speed, not the update rule",
    "evaluation.gradient_comparison_every": "how often the gradient comparison is logged; changes no update",
}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def _tree_size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def _is_temporary(name: str) -> bool:
    return name.startswith(TMP_PREFIX) or any(fnmatch.fnmatch(name, p) for p in TEMPORARY_PATTERNS)


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
        if _is_temporary(n):
            st.temporaries.append(os.path.join(run_dir, n))
        elif n not in RUN_FILES and not any(fnmatch.fnmatch(n, p) for p in KEPT_PATTERNS):
            st.foreign.append(n)
    ck_root = os.path.join(run_dir, "checkpoints")
    if os.path.isdir(ck_root):
        st.temporaries += [os.path.join(ck_root, n) for n in sorted(os.listdir(ck_root)) if _is_temporary(n)]
    st.checkpoints = checkpoint_dirs(run_dir)
    st.finished = os.path.isfile(os.path.join(run_dir, "summary.json"))
    cfg_path = os.path.join(run_dir, "config.json")
    if os.path.isfile(cfg_path):
        try:
            with open(cfg_path) as f:
                st.saved_config = config_from_dict(json.load(f))
        except (ValueError, TypeError, AttributeError) as exc:
            st.config_problem = _one_line(exc).split(";")[0] or type(exc).__name__
    else:
        st.config_problem = "missing"
    if st.config_problem not in (None, "missing"):
        st.foreign.append("config.json")  # a config.json we cannot read is not ours to overwrite
    st.kind = "foreign" if st.foreign else "run"
    return st


def config_differences(saved: dict, requested: dict, keys=None) -> list[tuple[str, object, object]]:
    """``[(dotted key, saved, requested)]`` for the keys (all if None) whose values differ."""
    a, b = _flatten(saved), _flatten(requested)
    keys = sorted(set(a) | set(b)) if keys is None else keys
    return [(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


def _describe(diffs, limit: int = 3) -> str:
    parts = [f"{k} (saved {s!r}, requested {r!r})" for k, s, r in diffs[:limit]]
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return ", ".join(parts) + more


# ---------------------------------------------------------------- metrics


def read_metrics(run_dir: str, step: int) -> tuple[list[str], int, bool]:
    """``(rows to keep, rows past step, partial last line?)`` of ``metrics.jsonl``.

    Raises :class:`RunDirError` for a damaged line that is not the last one.
    """
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return [], 0, False
    with open(path, "rb") as f:
        raw = f.read().decode("utf-8", errors="replace")
    lines = raw.split("\n")
    keep, dropped, partial = [], 0, False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        last = i == len(lines) - 1 or all(not rest.strip() for rest in lines[i + 1 :])
        try:
            row = json.loads(line)
            s = int(row["step"])
        except (ValueError, KeyError, TypeError):
            if last:
                partial = True  # killed while writing this row
                continue
            raise RunDirError(f"{path} line {i + 1} is damaged (not a JSON row with a 'step'); fix or remove it") from None
        if s <= step:
            keep.append(line + "\n")
        else:
            dropped += 1
    return keep, dropped, partial


def truncate_metrics(run_dir: str, step: int, log=print) -> None:
    """Drop the rows of ``metrics.jsonl`` past ``step`` and a half-written last line."""
    path = os.path.join(run_dir, "metrics.jsonl")
    keep, dropped, partial = read_metrics(run_dir, step)
    if partial:
        log(f"{path}: dropped a half-written last line")
    if dropped:
        log(f"{path}: dropped {dropped} row(s) past the checkpoint's step {step}; they will be recomputed")
    with open(path + ".tmp", "w") as f:
        f.writelines(keep)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fsync_dir(run_dir)


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
        run, log = self.run_dir, self.log
        remove_temporaries(self.temporaries, log)
        for name, _reason in self.damaged:
            src = os.path.join(run, "checkpoints", name)
            dst = os.path.join(run, "checkpoints", f"damaged-{name}")
            if os.path.exists(dst):
                dst += f"-{int(time.time())}"
            os.rename(src, dst)
            log(f"moved the damaged checkpoint aside to {dst}")
        truncate_metrics(run, step, log=log)
        if self.changes:
            summary = os.path.join(run, "summary.json")
            if os.path.isfile(summary):  # the finished run's result stays on disk
                kept = os.path.join(run, f"summary.step-{step:06d}.json")
                os.replace(summary, kept)
                log(f"kept the earlier summary as {kept}")
            with open(os.path.join(run, "resumes.jsonl"), "a") as f:
                f.write(json.dumps({"step": step, "changes": {k: [s, r] for k, s, r in self.changes}}) + "\n")
            fsync_file(os.path.join(run, "resumes.jsonl"))
            self.cfg.save(os.path.join(run, "config.json"))
            fsync_dir(run)
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
        keys |= {resolve_key(k) for k in _flatten(data)}
    return sorted(keys)


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
        why = f"; config.json: {st.config_problem}" if "config.json" in st.foreign and st.config_problem else ""
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


def _prepare_resume(st: RunDirState, cfg: TrainConfig, resume_keys, log) -> Prepared:
    run = st.path
    if st.saved_config is None:
        if st.config_problem in (None, "missing"):
            raise RunDirError(f"--resume: {run} is not a run directory (no config.json)")
        raise RunDirError(f"--resume: {run}/config.json is not a usable config: {st.config_problem}")
    saved = st.saved_config
    for name in ("cold_start_eval.json",):
        p = os.path.join(run, name)
        try:
            with open(p) as f:
                json.load(f)
        except (OSError, ValueError) as exc:
            raise RunDirError(f"--resume: {p} cannot be read ({_one_line(exc)})") from None
    cold = os.path.join(run, "cold_start")
    if not os.path.isdir(cold):
        raise RunDirError(f"--resume: {cold} is missing")
    if os.path.isfile(os.path.join(cold, "manifest.json")):
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
        raise RunDirError(f"--resume: {run} has no checkpoint yet")
    with open(os.path.join(ckpt, "state.json")) as f:
        step = int(json.load(f)["step"])
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
    read_metrics(run, step)  # refuses a damaged middle line before anything is written
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
