"""Replicating one declared question of a committed study on this machine.

``python -m sapo_lab replicate STUDY QUESTION`` re-runs the runs one declared test (or tuning arm) of
``results/STUDY`` needs, with the committed declaration's seeds and settings, into
``results/replications/FINGERPRINT/STUDY/`` (resumable like any study), then reads the question
there with the same code that reads the committed study and prints both answers side by side.

The verdict is declared here and is the same for every question:

* ``identical``: this machine's kernels are the producer's, and every endpoint value is equal;
* ``consistent``: the two 95% intervals overlap and the replication's mean difference lies on the
  committed mean's side of zero (any side when the committed interval holds zero);
* ``not consistent``: otherwise.

Whether the replication alone reaches the declared level (its own p below alpha) is reported
beside the verdict, not folded into it: ten fresh-kernel pairs can miss a level the original
reached and still agree with it.

When the rule was fixed, as the record shows: this module's first commit (07215af, 11:23:50 UTC on
2026-12-05) came 43 minutes after the committed replication of ``confirm_addition`` Q1 started its
first run (10:40:35 UTC in its ``environment.json``), while its runs were still training and before
its verdict was read. So the rule was not declared before any replication ran. It holds no number
from that replication, and its verdict, *consistent*, also passes stricter rules (each mean inside
the other's 95% interval; the replication's interval on the committed side of zero); chapter 13
checks both from git and the run records.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm

from ..evidence.analysis import primary_results
from ..evidence.results import Study, load_study
from ..runs.durable import write_json
from ..runs.identity import same_run
from ..runs.kernels import current_kernel_setting
from ..runs.study_folder import StudyFolder
from .environment import kernel_fingerprint, producer_kernels
from .expansion import expand_runs
from .spec import grid_leaf

REPLICATIONS = "replications"  # under the results folder: replications/FINGERPRINT/STUDY/
RECORD = "replication.json"
VERDICTS = ("identical", "consistent", "not consistent")


@dataclass(frozen=True)
class Question:
    """One declared question: its id, its wording and the methods (and grid cell) whose runs answer it."""

    study: str
    id: str
    text: str
    methods: tuple[str, ...]
    cell: dict


def find_question(study: Study, question_id: str) -> Question:
    """The declared test or tuning arm ``question_id`` of ``study``; a one-line ``ValueError`` otherwise."""
    plan = study.declaration.get("analysis")
    if plan is None:
        raise ValueError(f"study {study.name} declares no analysis: it has no questions to replicate")
    for test in plan.get("tests", []):
        if test["id"] == question_id:
            return Question(study.name, test["id"], test["question"], (test["method"], test["reference"]),
                            dict(test.get("cell") or {}))
    for arm in plan.get("tuning", []):
        if arm["id"] == question_id:
            methods = tuple(m for ms in arm["arms"].values() for m in ms)
            return Question(study.name, arm["id"], arm["question"], methods, {})
    ids = [t["id"] for t in plan.get("tests", [])] + [a["id"] for a in plan.get("tuning", [])]
    contrasts = [c["id"] for c in plan.get("contrasts", [])]
    hint = f" ({question_id} is a contrast: replicate reads declared tests and tuning arms)" if question_id in contrasts else ""
    raise ValueError(f"study {study.name} declares no question {question_id!r}{hint}; it declares {ids}")


def question_runs(study: Study, question: Question, root: str) -> list[dict]:
    """The declared runs (``expand_runs`` rows) that answer ``question``: its methods, in its cell."""

    rows = []
    for run in expand_runs(study.declaration, root):
        if run["method"] not in question.methods:
            continue
        grid = {grid_leaf(k): v for k, v in run.get("grid", {}).items()}
        if all(grid.get(grid_leaf(k), v) == v for k, v in question.cell.items()):
            rows.append(run)
    return rows


def training_seconds(study: Study, run_ids) -> float | None:
    """Seconds ``study``'s machine spent training these runs (their ``study_wall.json``), or None if unrecorded."""
    total = 0.0
    for run_id in run_ids:
        wall = study.folder.run(run_id).read_wall()
        if not wall:
            return None
        total += sum(entry["wall_s"] for entry in wall)
    return total


def answer(study: Study, question: Question) -> dict:
    """The question's declared result in ``study`` (:func:`sapo_lab.evidence.analysis.primary_results`' entry)."""
    for entry in primary_results(study):
        if entry["id"] == question.id:
            return entry
    raise KeyError(question.id)


def _side(interval) -> str:
    lo, hi = interval
    return "below zero" if hi < 0 else "above zero" if lo > 0 else "holds zero"


def verdict(committed: dict, here: dict, same_kernels: bool) -> str:
    """The declared verdict (module docstring) from two :class:`~sapo_lab.evidence.paired.PairedComparison` dicts."""
    if same_kernels and committed["differences"] == here["differences"]:
        return "identical"
    (c_lo, c_hi), (h_lo, h_hi) = committed["t_interval"], here["t_interval"]
    overlap = c_lo <= h_hi and h_lo <= c_hi
    side = _side(committed["t_interval"])
    same_side = side == "holds zero" or (here["mean"] < 0) == (committed["mean"] < 0)
    return "consistent" if overlap and same_side else "not consistent"


@dataclass
class ReplicationRecord:
    """What ``replicate`` concludes, as ``replication.json`` holds it."""

    study: str
    question: str
    text: str
    alpha: float
    committed: dict  # PairedComparison.to_dict() plus p
    here: dict
    committed_kernels: list
    here_kernels: str
    here_kernel_setting: str | None
    verdict: str
    here_reaches_level: bool
    committed_reaches_level: bool
    runs: list
    run_seconds: float  # the replicated runs' own training time here (study_wall.json), however many invocations

    def lines(self) -> list[str]:
        """The side-by-side report, verdict first, each line within 80 characters (a book column): both answers
        with their intervals and p-values, then the kernels each ran on."""
        def row(label, c):
            lo, hi = c["t_interval"]
            return f"  {label:<13}{c['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}]  p {c['p']:.3f}  {len(c['differences'])} pairs"

        method, reference = self.committed["method"], self.committed["reference"]
        level = f"{100 * (1 - self.alpha):.0f}%"
        here = self.here_kernels + (f" ({self.here_kernel_setting})" if self.here_kernel_setting else "")
        return [
            f"{self.study} {self.question}: {self.verdict.upper()} (rule declared in sapo_lab.studies.replicate)",
            *textwrap.wrap(self.text, 78, initial_indent="  ", subsequent_indent="  "),
            f"  {method} - {reference}, mean paired difference, {level} t interval:",
            row("committed", self.committed),
            row("this machine", self.here),
            f"  kernels: committed {', '.join(self.committed_kernels) or 'unrecorded'}; here {here}",
            f"  p < {self.alpha}: committed {'yes' if self.committed_reaches_level else 'no'}, "
            f"here {'yes' if self.here_reaches_level else 'no'}",
        ]


def replication_root(results: str | os.PathLike, fingerprint: str) -> Path:
    """``results/replications/FINGERPRINT``: a study replicated on one machine's kernels."""
    return Path(results) / REPLICATIONS / fingerprint


def conclude(committed: Study, replicated: Study, question: Question, here_kernels: str) -> ReplicationRecord:
    """Read ``question`` in both studies and apply the declared verdict."""
    alpha = committed.declaration["analysis"]["alpha"]
    old, new = answer(committed, question), answer(replicated, question)
    if new["comparison"] is None:
        raise ValueError(f"{replicated.path}: {question.id} is {new['status']}; run replicate again to finish it")
    c = {**old["comparison"].to_dict(), "p": old["p"]}
    h = {**new["comparison"].to_dict(), "p": new["p"]}
    known, _ = producer_kernels(committed.path)
    runs = sorted(r.run_id for r in replicated.runs if r.method in question.methods)
    return ReplicationRecord(
        study=committed.name, question=question.id, text=question.text, alpha=alpha, committed=c, here=h,
        committed_kernels=sorted(known), here_kernels=here_kernels, here_kernel_setting=current_kernel_setting(),
        verdict=verdict(c, h, here_kernels in known), here_reaches_level=h["p"] < alpha,
        committed_reaches_level=c["p"] < alpha, runs=runs, run_seconds=training_seconds(replicated, runs) or 0.0,
    )


def write_record(record: ReplicationRecord, folder: str | os.PathLike) -> Path:
    """``replication.json`` in the replicated study's folder, one entry per question (a rerun replaces its own)."""
    path = Path(folder) / RECORD
    entries = json.loads(path.read_text()) if path.is_file() else {}
    entries[record.question] = asdict(record)
    write_json(str(path), entries, sort_keys=True)
    return path


def read_records(results: str | os.PathLike) -> list[dict]:
    """Every committed replication record under ``results/replications`` (no torch): what chapter 13 reads."""
    out = []
    for path in sorted((Path(results) / REPLICATIONS).glob(f"*/*/{RECORD}")):
        out += list(json.loads(path.read_text()).values())
    return out


def plan_text(question: Question, runs: list[dict], todo: list[str], committed_s: float | None, cpu: str,
              target: Path) -> str:
    """What replicate is about to do, with the producer's recorded training time for it (the only measured
    estimate there is: a cold start the producer had cached is not in it)."""
    methods = ", ".join(question.methods)
    head = (f"replicate {question.study} {question.id}: {len(runs)} runs ({methods}) into {target}, "
            f"{len(todo)} to train in this invocation")
    if not todo:
        return head
    if committed_s is None:
        return head + "; the producer recorded no usable time for them"
    return (f"{head}; the producer's machine ({cpu}) recorded {committed_s / 60:.0f} min of training for these "
            f"({committed_s / 60 / len(todo):.1f} min a run, less any cold start it had cached); the progress bar "
            "re-estimates from this machine's runs")


def _read_committed(name: str, results_root: str) -> Study:
    """The committed study, or a one-line ``ValueError`` naming what is wrong with its folder."""
    root = Path(results_root)
    if not root.is_dir():
        raise ValueError(f"--results-root {results_root} is not a folder")
    try:
        study = load_study(name, root)
        if not isinstance(study.environment["invocations"], list):  # damaged: found before any training
            raise TypeError("environment.json's invocations are not a list")
    except FileNotFoundError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"{root / name} cannot be read as a committed study ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})") from None
    return study


def _check_replicated(committed: Study, runs: list[dict], folder: Path) -> None:
    """Refuse a replication folder that is not this declaration's: another ``study.json``, or a run whose saved
    config is not the one the declaration resolves to (one line, before any verdict is read)."""
    saved = StudyFolder(str(folder)).read_declaration()
    if saved != committed.declaration:
        raise ValueError(f"{folder}/study.json is not {committed.name}'s committed declaration: remove {folder} "
                         "and replicate again")
    for run in runs:
        run_folder = StudyFolder(str(folder)).run(run["run_id"])
        if os.path.isfile(run_folder.config) and not same_run(run_folder.read_config(), run["config"].to_dict()):
            raise ValueError(f"{run_folder.config} is not the config {committed.name} declares for {run['run_id']}: "
                             f"remove {run_folder.path} and replicate again")


def replicate_command(args) -> int:
    """``replicate STUDY QUESTION``: train the question's runs here, then print both answers and the verdict.

    The kernel setting (``args.kernels``) must already be applied: torch reads it once, when it loads. Exit
    status 0 when the verdict is ``identical`` or ``consistent``, 1 when ``not consistent``, 2 for a user error,
    130 when interrupted (rerun the same command to resume).
    """
    from .runner import run_status  # torch loads here, after the kernel setting is applied

    committed = _read_committed(args.study, args.results_root)
    question = find_question(committed, args.question)
    try:
        before = answer(committed, question)
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"{committed.path}: {question.id} cannot be read ({str(exc).splitlines()[0]})") from None
    if before["comparison"] is None:  # a damaged or partial committed study: found before hours of training
        raise ValueError(f"{committed.path}: the committed {question.id} is {before['status']}; nothing to compare with")
    from .runner import run_study

    here = kernel_fingerprint()
    root = replication_root(args.results_root, here)
    runs = question_runs(committed, question, str(root))
    folder = root / committed.name
    i, n = args.shard_pair
    mine = [r["run_id"] for k, r in enumerate(runs) if k % n == i]
    todo = [run_id for run_id in mine if run_status(str(folder / "runs" / run_id)) != "done"]
    env = committed.environment["invocations"]
    wall = training_seconds(committed, todo)
    wall = wall if wall is not None and math.isfinite(wall) and wall >= 0 else None
    print(plan_text(question, runs, todo, wall, env[0].get("processor", "?") if env else "?", folder),
          file=args.log_file, flush=True)
    if args.dry_run:
        return 0
    if StudyFolder(str(folder)).is_study():
        _check_replicated(committed, runs, folder)
    if todo:
        bar = tqdm(total=len(todo), unit="run", disable=args.no_progress, desc=f"{committed.name} {question.id}")
        try:
            res = run_study(str(committed.folder.declaration), str(root), log=lambda m: print(m, file=args.log_file),
                            progress=False, run_ids={r["run_id"] for r in runs}, shard=args.shard_pair,
                            on_run_end=lambda run_id, action: bar.update(0 if action == "skipped" else 1),
                            kernels=args.kernels)
        finally:
            bar.close()
        if res["status"] == "interrupted":
            return 130
    left = sum(run_status(str(folder / "runs" / r["run_id"])) != "done" for r in runs)
    if left:
        print(f"{left} of {len(runs)} runs still to finish (another shard?): run replicate again for the verdict")
        return 0
    replicated = load_study(committed.name, root)
    record = conclude(committed, replicated, question, here)
    path = write_record(record, root / committed.name)
    print("\n".join(record.lines()))
    print(f"record: {path}")
    return 1 if record.verdict == "not consistent" else 0
