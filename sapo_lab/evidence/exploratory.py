"""The gate map's exploratory readings: the ones its declaration lists beside the declared questions.

``experiments/gate_map.json`` names as exploratory every cell outside the declared questions,
best-dev checkpoints, collapse flags and the tuned comparison at other M. They are computed here,
each labelled, so the chapters print them and the decision table (:mod:`.decision`) may cite them
as what they are: readings taken one at a time, without adjustment for how many there are.

* :func:`best_dev_standing` -- the map's cells on the best-dev checkpoint, counted by side of zero;
* :func:`tuned_by_staleness` -- G3's rule (each method's learning rate chosen on dev) at every M;
* :func:`slope_at` -- G5's per-seed slope of the gap on log2 M, at any learning rate and set of M;
* :func:`collapse_counts` -- runs the declared collapse rule flagged, per method;
* :func:`pick_margins` -- how far each of G3's picks led its runner-up on dev, and the comparison
  the runner-up would have given;
* :func:`leaders` -- the configurations with the highest seed-mean final Pass@1;
* :func:`provenance` -- which code and which invocations produced the runs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .analysis import endpoint_value
from .contrasts import pairs_by_seed_ignoring, trend_slopes, tuned_contrast
from .gate_map import STUDY, Cell, GateStanding, Setting, map_cells, method_settings, where_the_gate_stands
from .paired import PairedComparison, compare
from .results import Study, load_study

BEST_DEV = "best_dev_eval_pass1"  # held-out Pass@1 of the checkpoint with the best dev Pass@1
LABEL = "exploratory"


def _study(study: Study | None) -> Study:
    return study if study is not None else load_study(STUDY)


def _plan(study: Study) -> dict:
    return study.declaration["analysis"]


def _contrast(study: Study, kind: str) -> dict:
    """The declared contrast of ``kind`` ("tuned" or "trend"); a ``ValueError`` when the map declares none."""
    found = [c for c in _plan(study).get("contrasts", []) if c["kind"] == kind]
    if len(found) != 1:
        raise ValueError(f"study {study.name} declares {len(found)} {kind} contrasts; these readings need one")
    return found[0]


def best_dev_standing(study: Study | None = None, settings: dict[str, Setting] | None = None) -> GateStanding:
    """The map's complete cells read on the best-dev checkpoint's held-out Pass@1 instead of the final one."""
    study = _study(study)
    settings = settings if settings is not None else method_settings(study)
    return where_the_gate_stands(map_cells(study, settings, metric=BEST_DEV), _plan(study)["alpha"])


@dataclass(frozen=True)
class TunedAtStaleness:
    """G3's tuning rule applied at one M: the two picks and their paired comparison on held-out data."""

    staleness: int
    picks: dict[str, str]  # arm -> method chosen on dev
    rates: dict[str, float]  # arm -> the picked learning rate
    comparison: PairedComparison | None
    checkpoint: str  # the endpoint compared: "final" or "best dev"
    declared: bool  # True only for the declared contrast's own M and endpoint


def _arms_at(study: Study, settings: dict[str, Setting], staleness: int) -> dict[str, list[str]]:
    """The declared tuned contrast's arms moved to another M: same loss, temperatures and rate order."""
    arms = {}
    for arm, methods in _contrast(study, "tuned")["arms"].items():
        moved = []
        for m in methods:
            s = settings[m]
            match = [n for n, t in settings.items() if (t.loss_type, t.tau_pos, t.tau_neg, t.learning_rate, t.staleness)
                     == (s.loss_type, s.tau_pos, s.tau_neg, s.learning_rate, staleness)]
            if len(match) != 1:
                raise ValueError(f"{study.name}: no single method like {m} at M = {staleness}")
            moved.append(match[0])
        arms[arm] = moved
    return arms


def tuned_by_staleness(study: Study | None = None, settings: dict[str, Setting] | None = None,
                       metric: str | None = None) -> list[TunedAtStaleness]:
    """G3's rule at every M of the map, in increasing M, compared on ``metric`` (default: the endpoint)."""
    study = _study(study)
    settings = settings if settings is not None else method_settings(study)
    plan = _plan(study)
    metric = metric or plan["endpoint"]["metric"]
    declared_c = _contrast(study, "tuned")
    declared_m = {settings[m].staleness for ms in declared_c["arms"].values() for m in ms}
    out = []
    for staleness in sorted({s.staleness for s in settings.values()}):
        c = {**declared_c, "arms": _arms_at(study, settings, staleness)}
        r = tuned_contrast(study, c, metric)
        picks = r["chosen"]
        out.append(TunedAtStaleness(
            staleness, picks, {a: settings[m].learning_rate for a, m in picks.items() if m},
            r.get("comparison"), "final" if metric == plan["endpoint"]["metric"] else "best dev",
            staleness in declared_m and metric == plan["endpoint"]["metric"]))
    return out


@dataclass(frozen=True)
class Slope:
    """The per-seed least-squares slope of the paired gap on log2 M, at one learning rate and temperature."""

    learning_rate: float
    tau_pos: float
    staleness: tuple[int, ...]
    comparison: PairedComparison  # the slopes against 0: mean, t interval, p
    declared: bool  # the declared trend's own points
    largest_gap: float  # the largest |mean gap| among the slope's cells


def slope_at(study: Study | None = None, settings: dict[str, Setting] | None = None, *,
             learning_rate: float, staleness: tuple[int, ...] | None = None, tau_pos: float = 1.0,
             cells: list[Cell] | None = None) -> Slope:
    """G5's statistic (per seed, slope of SAPO − GRPO on log2 M, tested against 0) at any rate and set of M.

    ``cells`` are the map's cells on the endpoint (:func:`~.gate_map.map_cells`), computed when not given.
    """
    study = _study(study)
    settings = settings if settings is not None else method_settings(study)
    cells = {c.sapo.staleness: c for c in (cells if cells is not None else map_cells(study, settings))
             if c.sapo.learning_rate == learning_rate and c.sapo.tau_pos == tau_pos}
    ms = tuple(sorted(cells)) if staleness is None else tuple(staleness)
    missing = [m for m in ms if m not in cells or cells[m].comparison is None]
    if missing or len(ms) < 3:
        raise ValueError(f"a slope at lr {learning_rate:g} needs three or more complete cells; "
                         f"missing M = {missing or ms}")
    gaps = {}
    for m in ms:
        cmp = cells[m].comparison
        for seed, d in zip(cmp.seeds, cmp.differences, strict=True):
            gaps.setdefault(seed, []).append(d)
    slopes = trend_slopes(gaps, [math.log2(m) for m in ms])
    cmp = compare({s: (v, 0.0) for s, v in slopes.items()}, "slope", "0", _plan(study)["alpha"])
    trend = _contrast(study, "trend")
    points = tuple(sorted(settings[p["method"]].staleness for p in trend["points"]))
    first = settings[trend["points"][0]["method"]]
    declared = (ms, learning_rate, tau_pos) == (points, first.learning_rate, first.tau_pos)
    return Slope(learning_rate, tau_pos, ms, cmp, declared, max(abs(cells[m].comparison.mean) for m in ms))


@dataclass(frozen=True)
class CollapseCounts:
    """Runs flagged by the study's declared collapse rule, per method, with each method's run count."""

    flagged: dict[str, int]
    runs: dict[str, int]

    def by_loss(self, settings: dict[str, Setting]) -> dict[str, tuple[int, int]]:
        """``{loss type: (flagged runs, runs)}``."""
        out: dict[str, list[int]] = {}
        for m, n in self.runs.items():
            row = out.setdefault(settings[m].loss_type, [0, 0])
            row[0] += self.flagged[m]
            row[1] += n
        return {k: (f, n) for k, (f, n) in out.items()}


def collapse_counts(study: Study | None = None) -> CollapseCounts:
    """How many of each method's finished runs the declared collapse rule flagged (``record["collapse"]``)."""
    study = _study(study)
    flagged, runs = {}, {}
    for m in study.methods():
        rs = study.select(m)
        runs[m] = len(rs)
        flagged[m] = sum(bool((r.record.get("collapse") or {}).get("collapsed")) for r in rs)
    return CollapseCounts(flagged, runs)


@dataclass(frozen=True)
class PickMargin:
    """One arm of the declared tuned contrast: its pick's dev lead over the runner-up, paired by seed."""

    arm: str
    pick: str
    runner_up: str
    margin: float  # mean over seeds of pick - runner-up on the tuning metric (dev)
    standard_error: float  # the paired differences' SD / sqrt(n)
    with_runner_up: PairedComparison  # the tuned comparison on eval had this arm taken its runner-up


def pick_margins(study: Study | None = None) -> dict[str, PickMargin]:
    """Per arm of the declared tuned contrast (G3): how close the dev choice was, and what the other choice gives."""
    study = _study(study)
    c = _contrast(study, "tuned")
    plan = _plan(study)
    metric, alpha = plan["endpoint"]["metric"], plan["alpha"]
    means = {a: {m: statistics.mean(endpoint_value(r, c["tune_on"]) for r in study.select(m)) for m in ms}
             for a, ms in c["arms"].items()}
    picks = {a: max(ms, key=ms.get) for a, ms in means.items()}  # max keeps the first of equal means, as declared
    out = {}
    first, second = list(c["arms"])
    for arm, ms in means.items():
        runner = max((m for m in ms if m != picks[arm]), key=ms.get)
        pairs = pairs_by_seed_ignoring(study, picks[arm], runner, c["differ_in"])
        diffs = [endpoint_value(a, c["tune_on"]) - endpoint_value(b, c["tune_on"]) for a, b in pairs.values()]
        se = statistics.stdev(diffs) / math.sqrt(len(diffs))
        sides = {**picks, arm: runner}
        eval_pairs = pairs_by_seed_ignoring(study, sides[first], sides[second], c["differ_in"])
        values = {s: (endpoint_value(a, metric), endpoint_value(b, metric)) for s, (a, b) in eval_pairs.items()}
        out[arm] = PickMargin(arm, picks[arm], runner, statistics.mean(diffs), se,
                              compare(values, sides[first], sides[second], alpha))
    return out


def leaders(study: Study | None = None, settings: dict[str, Setting] | None = None) -> list[tuple[str, float]]:
    """Every method with its seed-mean final Pass@1 (the endpoint), best first."""
    study = _study(study)
    metric = _plan(study)["endpoint"]["metric"]
    means = {m: statistics.mean(endpoint_value(r, metric) for r in study.select(m)) for m in study.methods()
             if study.select(m)}
    return sorted(means.items(), key=lambda kv: kv[1], reverse=True)


def leading_loss(study: Study | None = None, settings: dict[str, Setting] | None = None) -> tuple[str, int]:
    """The loss type of the best configuration and how many of the best in a row share it."""
    study = _study(study)
    settings = settings if settings is not None else method_settings(study)
    ranked = [settings[m].loss_type for m, _ in leaders(study)]
    run = next((i for i, t in enumerate(ranked) if t != ranked[0]), len(ranked))
    return ranked[0], run


@dataclass(frozen=True)
class Provenance:
    """What the study's environment record and run folders say about how its runs were produced."""

    invocations: int
    training_invocations: int  # invocations that started or resumed at least one run
    dirty_training_invocations: int  # of those, run from a tree with uncommitted changes
    commits: list[str]  # short commits of the training invocations, '+' when dirty
    resumed_runs: list[str]  # runs whose training was resumed after an interruption
    unrecorded_runs: list[str]  # finished runs that no recorded invocation started or resumed
    runs: int

    def sentence(self) -> str:
        """The provenance in plain words, every count from the record."""
        n = len(self.resumed_runs)
        resumed = (f"{n} {'run was' if n == 1 else 'runs were'} resumed after an interruption "
                   f"({', '.join(self.resumed_runs)})" if self.resumed_runs else "no run was resumed")
        gap = (f"{len(self.unrecorded_runs)} of the {self.runs} runs were trained by an invocation that left no "
               "record in environment.json (an invocation gap: its commit and tree state are unknown)"
               if self.unrecorded_runs else f"every one of the {self.runs} runs was trained by a recorded invocation")
        return (f"The study's record lists {self.invocations} invocations; {self.training_invocations} of them "
                f"trained runs, and {self.dirty_training_invocations} of those ran from a tree with uncommitted "
                f"changes (commits {', '.join(self.commits)}; '+' marks them). {resumed[0].upper() + resumed[1:]}; "
                f"{gap}.")


def provenance(study: Study | None = None) -> Provenance:
    """Invocations, tree state, resumed runs and runs no invocation record accounts for."""
    study = _study(study)
    invocations = study.environment["invocations"]
    trained = [inv for inv in invocations
               if any(a in ("started", "resumed") for a in (inv.get("actions") or {}).values())]
    accounted = {r for inv in trained for r, a in inv["actions"].items() if a in ("started", "resumed")}
    resumed = sorted(r.run_id for r in study.runs
                     if any(e["action"] == "resumed" for e in study.folder.run(r.run_id).read_wall()))
    commits = sorted({inv["git_commit"][:7] + ("+" if inv["git_dirty"] else "") for inv in trained})
    return Provenance(len(invocations), len(trained), sum(bool(inv["git_dirty"]) for inv in trained), commits,
                      resumed, sorted(r.run_id for r in study.runs if r.run_id not in accounted), len(study.runs))
