"""A study folder's files: every name in it, beside the run folders it holds.

::

    RESULTS_ROOT/NAME/
      study.json             the declaration, as run
      environment.json       one entry per invocation: versions, git commit, machine, dates, wall time
      summary.json           one row per finished run (and summary.csv, the same table)
      .gitignore             weights stay out of git: checkpoints, snapshots, cold starts, final models
      _coldstart/            the cold starts the study's runs share (one per seed and task)
      runs/RUN_ID/           a run folder (:mod:`.run_folder`), plus the study's own files:
        study_record.json    the run's collapse verdict, selected checkpoints and counters
        diverged.json        written instead of summary.json when training diverged
        study_wall.json      wall time of each invocation that trained the run

:class:`StudyFolder` and :class:`StudyRunFolder` are the only places these names are spelled;
every write goes through :mod:`.durable`. Reading them needs neither torch nor pydantic.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .durable import atomic_write, write_json
from .run_folder import RunFolder

DECLARATION = "study.json"
ENVIRONMENT = "environment.json"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
GITIGNORE = ".gitignore"
COLD_START_CACHE = "_coldstart"
RUNS = "runs"
STUDY_RECORD = "study_record.json"
DIVERGED = "diverged.json"
STUDY_WALL = "study_wall.json"
KERNEL_RECORD = "kernel_fingerprint.json"  # a producer fingerprint measured after the study (it predates the field)

# What a study adds to each of its run folders: a run's files too, never a user's (see run_policy.classify).
STUDY_RUN_FILES = (STUDY_RECORD, DIVERGED, STUDY_WALL)
IGNORED = (f"{RUNS}/*/checkpoints/", f"{RUNS}/*/snapshots/", f"{RUNS}/*/cold_start/", f"{RUNS}/*/final_model/",
           f"{COLD_START_CACHE}/", "*.tmp")


def _read_json(path: str, default=None):
    if default is not None and not os.path.isfile(path):
        return default
    with open(path) as f:
        return json.load(f)


@dataclass(frozen=True)
class StudyRunFolder(RunFolder):
    """One run folder of a study: the run's own files and the three the study writes beside them."""

    @property
    def record(self) -> str:
        return self.file(STUDY_RECORD)

    @property
    def diverged(self) -> str:
        return self.file(DIVERGED)

    @property
    def wall(self) -> str:
        return self.file(STUDY_WALL)

    def has_record(self) -> bool:
        return os.path.isfile(self.record)

    def read_record(self) -> dict:
        return _read_json(self.record)

    def write_record(self, record: dict) -> None:
        write_json(self.record, record)

    def read_diverged(self) -> dict | None:
        """``{"error", "step"}`` when training diverged, else None."""
        return _read_json(self.diverged) if os.path.isfile(self.diverged) else None

    def write_diverged(self, error: str, step: int) -> None:
        write_json(self.diverged, {"error": error, "step": step})

    def read_wall(self) -> list[dict]:
        """``[{"action", "wall_s"}, ...]``, one per invocation that trained the run (empty if none)."""
        return _read_json(self.wall, [])

    def append_wall(self, action: str, wall_s: float) -> None:
        write_json(self.wall, self.read_wall() + [{"action": action, "wall_s": wall_s}])


@dataclass(frozen=True)
class StudyFolder:
    """The paths of one study folder (``RESULTS_ROOT/NAME``) and the reads and writes a study makes there."""

    path: str

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def declaration(self) -> str:
        return self.file(DECLARATION)

    @property
    def environment(self) -> str:
        return self.file(ENVIRONMENT)

    @property
    def summary(self) -> str:
        return self.file(SUMMARY_JSON)

    @property
    def summary_csv(self) -> str:
        return self.file(SUMMARY_CSV)

    @property
    def runs(self) -> str:
        return self.file(RUNS)

    @property
    def cold_start_cache(self) -> str:
        return self.file(COLD_START_CACHE)

    def run(self, run_id: str) -> StudyRunFolder:
        return StudyRunFolder(os.path.join(self.runs, run_id))

    def run_ids(self) -> list[str]:
        """The run folders present, sorted by name (finished or not)."""
        if not os.path.isdir(self.runs):
            return []
        return sorted(n for n in os.listdir(self.runs) if os.path.isdir(os.path.join(self.runs, n)))

    def is_study(self) -> bool:
        """True when the folder holds a declaration (a study has run, or is running, here)."""
        return os.path.isfile(self.declaration)

    def read_declaration(self) -> dict:
        return _read_json(self.declaration)

    def write_declaration(self, declaration: dict) -> None:
        write_json(self.declaration, declaration)

    def read_environment(self) -> dict:
        """``{"invocations": [...]}``."""
        return _read_json(self.environment)

    def read_invocations(self) -> list[dict]:
        return self.read_environment()["invocations"] if os.path.isfile(self.environment) else []

    def read_kernel_record(self) -> dict:
        """``kernel_fingerprint.json``: the producer's fingerprint measured afterwards and the kernels it is known
        not to reproduce on (``{}`` where the study's invocations recorded their own)."""
        return _read_json(self.file(KERNEL_RECORD), {})

    def append_invocation(self, invocation: dict) -> None:
        write_json(self.environment, {"invocations": self.read_invocations() + [invocation]})

    def read_summary(self) -> list[dict]:
        """The summary rows (empty before the first run finished)."""
        return _read_json(self.summary, [])

    def write_summary(self, rows: list[dict], csv_text: str) -> None:
        write_json(self.summary, rows)
        atomic_write(self.summary_csv, csv_text.encode())

    def start(self) -> None:
        """The ``runs/`` folder and the ``.gitignore`` that keeps weights out of git."""
        os.makedirs(self.runs, exist_ok=True)
        atomic_write(self.file(GITIGNORE), "".join(f"{p}\n" for p in IGNORED))


def study_names(results_root: str | os.PathLike) -> list[str]:
    """The studies under a results folder (those holding a declaration), sorted."""
    root = os.fspath(results_root)
    return sorted(n for n in os.listdir(root) if StudyFolder(os.path.join(root, n)).is_study())
