"""A run folder's files: every name in it, the one reader of ``metrics.jsonl``, and how each file is written.

::

    RUN_DIR/
      config.json            the resolved config (keys sorted)
      cold_start/            the cold-start model and tokenizer (with a manifest)
      cold_start_eval.json   held-out evaluation of the cold start
      metrics.jsonl          one JSON row per rollout step
      checkpoints/           step-NNNNNN/ folders and latest.json (runs.checkpoint)
      final_model/           the model after the last step
      summary.json           the finished run's report
      resumes.jsonl          one row per resume that changed a key (with summary.step-NNNNNN.json set aside)
      snapshots/             step-NNNNNN/ weights a study keeps for checkpoint selection

:class:`RunFolder` is the only place these names are spelled. Every file the run writes
goes through :mod:`sapo_lab.runs.durable`: whole files atomically and fsynced, the
metrics rows appended and fsynced.

**metrics.jsonl and a torn last line.** A kill while a row is being appended can leave
the last line incomplete. :func:`read_metrics` is the one reader and decides this once:
the last non-blank line, when it is not a JSON row, is a row that was being written; it
is left out and reported (``MetricsLog.torn_last_line``). Any other line that is not a
JSON object with an integer ``step``, or a step that does not increase, is a
:class:`RunDirError` naming the file and the line: that file was changed by hand or by
another program, and no number is read from it.

Which folder ``train`` may use, and how ``--resume`` treats it, is :mod:`.run_policy`.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass, field

from .durable import TMP_SUFFIX, append_line, atomic_write, write_json

CONFIG = "config.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
COLD_START = "cold_start"
COLD_START_EVAL = "cold_start_eval.json"
CHECKPOINTS = "checkpoints"
FINAL_MODEL = "final_model"
RESUMES = "resumes.jsonl"
SNAPSHOTS = "snapshots"
LATEST = "latest.json"  # inside checkpoints/: a hint for people, never trusted by resume

# What a run writes into its folder; anything else there is the user's ("foreign").
RUN_FILES = (CONFIG, METRICS, COLD_START, COLD_START_EVAL, CHECKPOINTS, FINAL_MODEL, SUMMARY, RESUMES)
CHECKPOINT_TMP_PREFIX = ".tmp-step-"  # a checkpoint being written: .tmp-step-NNNNNN-PID/
# Leftovers of interrupted writes (NAME.tmp, a folder's NAME.tmp-PID, a replaced folder's NAME.old-PID).
TEMPORARY_PATTERNS = (f"*{TMP_SUFFIX}", f"*{TMP_SUFFIX}-*", "*.old-*")
KEPT_PATTERNS = ("summary.step-*.json",)  # set aside by a resume, kept
_STEP_DIR = re.compile(r"^step-(\d+)$")

# Keys ``--resume`` may change, and why that is safe. All others are refused.
RESUMABLE = {
    "optimization.max_steps": "train longer (or stop earlier), never below the checkpoint's step",
    "max_train_time_s": "a new wall-clock limit for the rest of the run",
    "save_steps": "how often checkpoints are written; changes no number",
    "threads": "CPU threads; changes speed, not the update rule",
    "evaluation.gradient_comparison_every": "how often the gradient comparison is logged; changes no update",
}


class RunDirError(ValueError):
    """A run directory that cannot be used as asked; the message is one line."""


def step_dir_name(step: int) -> str:
    """``step-NNNNNN``: the folder of a checkpoint or snapshot."""
    return f"step-{step:06d}"


def parse_step_dir(name: str) -> int | None:
    """The step of a ``step-NNNNNN`` folder name, None for any other name."""
    m = _STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def is_temporary(name: str) -> bool:
    """A half-written leftover of a killed run (see :data:`TEMPORARY_PATTERNS`), safe to delete."""
    return name.startswith(CHECKPOINT_TMP_PREFIX) or any(fnmatch.fnmatch(name, p) for p in TEMPORARY_PATTERNS)


def is_kept(name: str) -> bool:
    """A file a resume set aside on purpose."""
    return any(fnmatch.fnmatch(name, p) for p in KEPT_PATTERNS)


def checkpoint_tmp_name(step: int) -> str:
    """The folder a checkpoint is written into before it is renamed to :func:`step_dir_name`."""
    return f"{CHECKPOINT_TMP_PREFIX}{step:06d}-{os.getpid()}"


def kept_summary_name(step: int) -> str:
    """Where a finished run's ``summary.json`` is set aside when a resume changes a key."""
    return f"summary.{step_dir_name(step)}.json"


# ---------------------------------------------------------------- metrics.jsonl


@dataclass
class MetricsLog:
    """What :func:`read_metrics` found: the rows, each row's line as written, and whether a torn last line was left out."""

    rows: list[dict] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # with their newline, for rewriting a prefix unchanged
    torn_last_line: bool = False


def read_metrics(path: str) -> MetricsLog:
    """The rows of a ``metrics.jsonl`` (an empty log if the file does not exist); see the module docstring."""
    if not os.path.isfile(path):
        return MetricsLog()
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", errors="replace").split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    log, previous = MetricsLog(), None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            step = row["step"]
            assert isinstance(step, int) and not isinstance(step, bool)
        except (ValueError, KeyError, TypeError, AssertionError):
            if i == last:
                log.torn_last_line = True  # killed while appending this row
                continue
            why = "not a JSON row with an integer 'step'"
            raise RunDirError(f"{path} line {i + 1} is damaged ({why}); fix or remove it") from None
        if previous is not None and step <= previous:
            raise RunDirError(f"{path} line {i + 1}: step {step} after step {previous} (steps must be increasing integers)")
        previous = step
        log.rows.append(row)
        log.lines.append(line + "\n")
    return log


# ---------------------------------------------------------------- the folder


@dataclass(frozen=True)
class RunFolder:
    """The paths of one run folder and the writes a run makes into it."""

    path: str

    def file(self, name: str) -> str:
        """``RUN_DIR/name``."""
        return os.path.join(self.path, name)

    @property
    def config(self) -> str:
        return self.file(CONFIG)

    @property
    def metrics(self) -> str:
        return self.file(METRICS)

    @property
    def summary(self) -> str:
        return self.file(SUMMARY)

    @property
    def cold_start(self) -> str:
        return self.file(COLD_START)

    @property
    def cold_start_eval(self) -> str:
        return self.file(COLD_START_EVAL)

    @property
    def checkpoints(self) -> str:
        return self.file(CHECKPOINTS)

    @property
    def final_model(self) -> str:
        return self.file(FINAL_MODEL)

    @property
    def resumes(self) -> str:
        return self.file(RESUMES)

    @property
    def snapshots(self) -> str:
        return self.file(SNAPSHOTS)

    def write_config(self, cfg) -> None:
        """``config.json``: the resolved config (its format is ``TrainConfig.save``'s)."""
        cfg.save(self.config)

    def read_config(self) -> dict:
        """``config.json`` as saved: plain JSON (``config_from_dict`` makes it a ``TrainConfig``)."""
        with open(self.config) as f:
            return json.load(f)

    def write_cold_start_eval(self, report: dict) -> None:
        write_json(self.cold_start_eval, report)

    def read_cold_start_eval(self) -> dict:
        with open(self.cold_start_eval) as f:
            return json.load(f)

    def write_summary(self, summary: dict) -> None:
        write_json(self.summary, summary)

    def read_summary(self) -> dict:
        """``summary.json``: the finished run's report."""
        with open(self.summary) as f:
            return json.load(f)

    def has_summary(self) -> bool:
        return os.path.isfile(self.summary)

    def start_metrics(self) -> None:
        """An empty ``metrics.jsonl``: the run has started and has no row yet."""
        atomic_write(self.metrics, "")

    def append_metrics(self, row: dict) -> None:
        append_line(self.metrics, json.dumps(row) + "\n")

    def read_metrics(self) -> MetricsLog:
        return read_metrics(self.metrics)

    def truncate_metrics(self, step: int, log=print) -> None:
        """Keep the rows up to ``step`` (what a checkpoint at ``step`` has seen); drop later rows and a torn last line."""
        found = self.read_metrics()
        kept = [line for row, line in zip(found.rows, found.lines, strict=True) if row["step"] <= step]
        if found.torn_last_line:
            log(f"{self.metrics}: dropped a half-written last line")
        if len(kept) < len(found.rows):
            log(f"{self.metrics}: dropped {len(found.rows) - len(kept)} row(s) past the checkpoint's step {step}; "
                "they will be recomputed")
        atomic_write(self.metrics, "".join(kept))

    def append_resume(self, record: dict) -> None:
        append_line(self.resumes, json.dumps(record) + "\n")
