"""Reading a finished (or partly finished) study: what the evidence chapters import.

A study's results live in ``results/NAME/`` (:mod:`sapo_lab.studies.runner`): a summary table with
one row per finished run, and per run its metrics (one row per rollout step), its config, and
the study's record of it (collapse verdict, selected checkpoints, counters). This module only
reads them, through the folders that own the file names (:mod:`sapo_lab.runs.study_folder`,
:mod:`sapo_lab.runs.run_folder`): :class:`Study` and :class:`Run` are the typed readers the
chapters use. Importing it loads neither torch nor pydantic.

Curves over seeds are summarised by their mean and their seed range (min, max). With two or
three seeds a normal interval would be a pretence of precision; the range shows every seed.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..book_data import cache_root
from ..runs.metric_names import canonical
from ..runs.snapshots import run_metric_rows
from ..runs.study_folder import StudyFolder, StudyRunFolder
from ..runs.study_folder import study_names as _study_names


def results_root(start: str | os.PathLike | None = None) -> Path:
    """The repository's ``results/`` folder, found from ``start`` (default: cwd) or a parent.

    Chapters run from ``book/`` and tests from the repository root; both find the same folder.
    """
    here = Path(start or os.getcwd()).resolve()
    for p in (here, *here.parents):
        if (p / "results").is_dir() and (p / "experiments").is_dir():
            return p / "results"
    # a chapter run alone reads what its first cell fetched
    if (cache_root() / "results").is_dir() and (cache_root() / "experiments").is_dir():
        return cache_root() / "results"
    raise FileNotFoundError(f"no results/ folder next to an experiments/ folder above {here}")


@dataclass
class Run:
    """One finished run of a study: its identity, its record and (loaded on demand) its metrics."""

    run_id: str
    method: str
    seed: int
    grid: dict
    record: dict
    path: Path
    _rows: list | None = field(default=None, repr=False)

    @property
    def folder(self) -> StudyRunFolder:
        """The run's folder: every file name in it."""
        return StudyRunFolder(str(self.path))

    @property
    def config(self) -> dict:
        """The run's resolved config, as saved (plain JSON; ``config_from_dict`` makes it a ``TrainConfig``)."""
        return self.folder.read_config()

    @property
    def summary(self) -> dict:
        """The finished run's report (held-out Pass@1 before and after, steps, time)."""
        return self.folder.read_summary()

    @property
    def cold_start_eval(self) -> dict:
        """The held-out evaluation of the run's cold start, and the cold start's cache key."""
        return self.folder.read_cold_start_eval()

    @property
    def rows(self) -> list[dict]:
        """The run's ``metrics.jsonl`` rows, one per rollout step (read by :func:`run_metric_rows`)."""
        if self._rows is None:
            self._rows = run_metric_rows(str(self.path))
        return self._rows

    @property
    def cold_start_key(self) -> str:
        """Which cold start the run began from (its cache key): runs with one key share their starting weights.

        The key depends on the seed and on the task and SFT settings, so one seed on two tasks gives two keys.
        """
        return self.cold_start_eval["cold_start"]["key"]

    def series(self, metric: str) -> tuple[list[int], list[float]]:
        """(steps, values) of ``metric`` over the rows where it was measured (not null, finite).

        ``metric`` is a row key (``eval/dev_pass1``, or a key a callback added to the rows) or a flat
        name from before the namespaces; an unknown name is a ``ValueError``, not an empty series.
        """
        steps, values = [], []
        key = metric if any(metric in r for r in self.rows) else canonical(metric)
        for r in self.rows:
            v = r.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                steps.append(r["step"])
                values.append(float(v))
        return steps, values

    def selection(self, by: str) -> dict | None:
        """The record's selection whose tag is ``by`` (``best_dev``, ``final``, ``step_50``...)."""
        for sel in self.record.get("selections", []):
            if selection_tag(sel) == by or sel["by"] == by:
                return sel
        return None


def selection_tag(selection: dict) -> str:
    """A selection's name in records and summary columns: its rule, and its value where it has one (``step_50``)."""
    return selection["by"] + (f"_{value_tag(selection['value'])}" if selection.get("value") is not None else "")


def value_tag(value) -> str:
    """A number or name as it appears in run ids and summary columns: ``2e-4`` -> ``0.0002``, ``1e6`` -> ``1e06``.

    Only letters, digits and ``_ . = -`` survive; a float exponent's ``+`` is dropped rather than
    replaced, because ``1e-06`` would name another number.
    """
    text = f"{value:g}".replace("e+", "e") if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9_.=-]", "-", text)


@dataclass
class Study:
    """A study's declaration, its finished runs and its summary rows."""

    name: str
    path: Path
    declaration: dict
    runs: list[Run]
    summary: list[dict]

    def methods(self) -> list[str]:
        """Methods in declaration order."""
        return list(self.declaration["methods"])

    def select(self, method: str | None = None, **grid) -> list[Run]:
        """Finished runs of ``method`` (any if None) whose grid values match ``grid`` (leaf names or full keys)."""
        out = []
        for run in self.runs:
            if method is not None and run.method != method:
                continue
            leaves = {k.rsplit(".", 1)[-1]: v for k, v in run.grid.items()}
            if all(run.grid.get(k, leaves.get(k)) == v for k, v in grid.items()):
                out.append(run)
        return out

    @property
    def folder(self) -> StudyFolder:
        """The study's folder: every file name in it."""
        return StudyFolder(str(self.path))

    @property
    def environment(self) -> dict:
        """``{"invocations": [...]}``: per invocation, versions, git commit, machine, dates and wall time."""
        return self.folder.read_environment()

    def run(self, run_id: str) -> Run:
        """The finished run ``run_id``; a ``KeyError`` naming the study when it has not finished (or does not exist)."""
        for run in self.runs:
            if run.run_id == run_id:
                return run
        raise KeyError(f"study {self.name} has no finished run {run_id!r}")

    def provenance(self) -> dict:
        """Where the study's numbers came from, read from its environment record: command, commits, dates, wall time."""
        invocations = self.environment["invocations"]
        commands = sorted({"python -m sapo_lab " + " ".join(inv["argv"][1:]) for inv in invocations})
        return {
            "study": self.name,
            "commands": commands,
            "commits": sorted({inv["git_commit"][:7] + ("+" if inv["git_dirty"] else "") for inv in invocations}),
            "started": min(inv["started_utc"] for inv in invocations)[:16],
            "finished": max(inv.get("finished_utc") or inv["started_utc"] for inv in invocations)[:16],
            "wall_s": sum(inv.get("wall_s", 0.0) for inv in invocations),
            "torch": sorted({inv["torch"] for inv in invocations}),
            "cpu_count": sorted({inv["cpu_count"] for inv in invocations}),
        }

    def grid_values(self, key: str) -> list:
        """The declared values of one grid key (leaf name or full key), in order."""
        for k, vals in self.declaration.get("grid", {}).items():
            if k == key or k.rsplit(".", 1)[-1] == key:
                return list(vals)
        raise KeyError(f"study {self.name} has no grid key {key!r}")


def load_study(name: str, root: str | os.PathLike | None = None) -> Study:
    """Everything finished so far in ``results/NAME``; ``root`` is the results folder (default: found)."""
    base = Path(root) if root is not None else results_root()
    path = base / name
    folder = StudyFolder(str(path))
    if not folder.is_study():
        raise FileNotFoundError(f"{path} holds no study (no declaration): run python -m sapo_lab study experiments/{name}.json")
    declaration = folder.read_declaration()
    summary = folder.read_summary()
    runs = []
    for run_id in folder.run_ids():
        run_folder = folder.run(run_id)
        if not run_folder.has_record():
            continue  # still running, or interrupted: not evidence yet
        rec = run_folder.read_record()
        runs.append(Run(rec["run_id"], rec["method"], rec["seed"], rec.get("grid", {}), rec, Path(run_folder.path)))
    order = {m: i for i, m in enumerate(declaration["methods"])}
    runs.sort(key=lambda r: (order.get(r.method, len(order)), json.dumps(r.grid, sort_keys=True), r.seed))
    return Study(name, path, declaration, runs, summary)


def study_names(root: str | os.PathLike | None = None) -> list[str]:
    """The studies in the results folder (``root``, default: found by :func:`results_root`), sorted."""
    return _study_names(Path(root) if root is not None else results_root())


@dataclass
class Band:
    """A metric over steps across seeds: the mean and the seed range at each step every seed measured."""

    steps: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]
    seeds: int


def seed_band(runs: list[Run], metric: str) -> Band:
    """Mean, min and max of ``metric`` over ``runs`` at the steps all of them measured it."""
    if not runs:
        raise ValueError("no runs to summarise")
    per_run = [dict(zip(*r.series(metric), strict=True)) for r in runs]
    common = sorted(set.intersection(*(set(d) for d in per_run)))
    mean, low, high = [], [], []
    for s in common:
        vals = [d[s] for d in per_run]
        mean.append(sum(vals) / len(vals))
        low.append(min(vals))
        high.append(max(vals))
    return Band(common, mean, low, high, len(runs))


def spread(values: list[float]) -> dict:
    """Mean, min, max, sample standard deviation (None for one value) and count of ``values``."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        raise ValueError("no values")
    m = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return {"mean": m, "min": min(vals), "max": max(vals), "sd": sd, "n": len(vals)}


def band_figure(bands: dict[str, Band], *, title: str = "", yaxis: str = "", xaxis: str = "rollout step"):
    """A plotly figure: per label, the mean line and a shaded min-max band over seeds."""
    import plotly.graph_objects as go

    palette = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f")
    fig = go.Figure()
    for i, (label, b) in enumerate(bands.items()):
        colour = palette[i % len(palette)]
        fig.add_trace(go.Scatter(x=b.steps + b.steps[::-1], y=b.high + b.low[::-1], fill="toself", line=dict(width=0),
                                 fillcolor=colour, opacity=0.18, hoverinfo="skip", showlegend=False, legendgroup=label))
        fig.add_trace(go.Scatter(x=b.steps, y=b.mean, mode="lines", line=dict(color=colour),
                                 name=f"{label} ({b.seeds} seeds)", legendgroup=label))
    fig.update_layout(title=title, xaxis_title=xaxis, yaxis_title=yaxis, template="plotly_white",
                      margin=dict(l=50, r=20, t=50, b=40), height=380)
    return fig


def provenance_markdown(studies: list[Study]) -> str:
    """A Markdown table naming, for each study, the command and commit that produced it (``+``: uncommitted changes)."""
    lines = ["| study | command | commit | ran (UTC) | wall time, summed over shards | torch, CPUs |",
             "|---|---|---|---|---|---|"]
    for study in studies:
        p = study.provenance()
        commands = "<br>".join(f"`{c}`" for c in p["commands"])
        lines.append(f"| `{p['study']}` | {commands} | {', '.join(p['commits'])} | {p['started']} to {p['finished']} | "
                     f"{p['wall_s'] / 60:.0f} min | {', '.join(p['torch'])}, {', '.join(map(str, p['cpu_count']))} |")
    return "\n".join(lines)
