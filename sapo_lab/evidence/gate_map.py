"""The gate map (``experiments/gate_map.json``) read: the paired SAPO − GRPO gap in every cell, and its answers.

The map crosses the gate (GRPO's clip, or SAPO at three temperatures) with the learning rate and
the staleness M (update minibatches per rollout batch). A *cell* is one SAPO setting against GRPO
at the same learning rate and M, paired by seed; its gap is SAPO − GRPO in final held-out Pass@1.

* :func:`map_cells` -- every cell, declared or exploratory, with its paired statistics once complete;
* :func:`declared_answers` -- the declaration's questions (G1–G5), each one line with interval and p;
* :func:`where_the_gate_stands` -- the plain statement: in how many cells the gate helps, hurts or
  shows no difference, from the cells' intervals, and what that rests on.

Nothing here holds a number: every sentence is computed from the runs in ``results/gate_map``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..half_width import sapo_half_width
from .analysis import endpoint_value, pairs_in_study
from .confirmatory import interval_text, rate_text
from .contrasts import contrast_results, declared_results
from .paired import PairedComparison, compare
from .results import Study, load_study

STUDY = "gate_map"


@dataclass(frozen=True)
class Setting:
    """One declared method's place in the map."""

    method: str
    loss_type: str
    tau_pos: float
    tau_neg: float
    learning_rate: float
    staleness: int  # M: update minibatches per rollout batch

    @property
    def half_width(self) -> float | None:
        """Where SAPO's gate on the positive side halves, |r − 1|; None for the clip."""
        return sapo_half_width(self.tau_pos) if self.loss_type == "sapo" else None


@dataclass(frozen=True)
class Cell:
    """A SAPO setting against GRPO at the same learning rate and M: its pairs and, once complete, statistics."""

    sapo: Setting
    grpo: Setting
    declared_seeds: int
    finished_pairs: int
    in_declared_question: bool
    comparison: PairedComparison | None  # None until every declared seed's pair has finished

    @property
    def verdict(self) -> str | None:
        """"helps" / "hurts" when the t interval excludes zero on that side, "no difference" when it holds zero."""
        if self.comparison is None:
            return None
        return {1: "helps", -1: "hurts", 0: "no difference"}[side_of_zero(self.comparison)]


SIDE_WORDS = {1: "above zero", -1: "below zero", 0: "holds zero"}  # what an interval shows, no more


def cell_reading(cell: Cell, answers: list[dict]) -> str:
    """A cell's reading in the map's table: ``declared (G4b): below zero before Holm's adjustment, not after``
    for a cell a declared question compares (its level from Holm's decision, "still pending" while the family
    waits for its other members), ``exploratory: holds zero`` for
    any other; "" while the cell is incomplete. The words say where the interval lies, not that the gate
    helps or hurts."""
    if cell.comparison is None:
        return ""
    side = side_of_zero(cell.comparison)
    words = SIDE_WORDS[side]
    for a in answers:
        cmp = a.get("comparison")
        if cmp is None or a.get("kind") == "trend" or (cmp.method, cmp.reference) != (cell.sapo.method, cell.grpo.method):
            continue
        if side != 0 and a.get("reject") is None:  # the family's Holm adjustment waits for its other members
            words += " before Holm's adjustment, which is still pending"
        elif side != 0 and not a["reject"]:
            words += " before Holm's adjustment, not after" if a.get("family") else ", not at the declared level"
        elif side != 0:
            words += ", at the declared level"
        return f"declared ({a['id']}): {words}"
    return f"exploratory: {words}"


def side_of_zero(comparison) -> int:
    """+1 when the comparison's t interval lies above zero, -1 below, 0 when it holds zero."""
    lo, hi = comparison.t_interval
    return 1 if lo > 0 else -1 if hi < 0 else 0


def method_settings(study: Study) -> dict[str, Setting]:
    """Each method's loss type, temperatures, learning rate and M, read from its first finished run's saved
    config: what the runs trained with, not what the declaration resolves to today. A method with no
    finished run has no setting yet, so its cell appears once one of its runs finishes."""
    out = {}
    for method in study.methods():
        runs = study.select(method)
        if not runs:
            continue
        cfg = runs[0].config
        loss, opt = cfg["loss"], cfg["optimization"]
        out[method] = Setting(method, loss["loss_type"], loss["sapo_temperature_pos"], loss["sapo_temperature_neg"],
                              opt["learning_rate"], opt["steps_per_generation"])
    return out


def _declared_pairs(study: Study) -> set[tuple[str, str]]:
    """(method, reference) that a declared question compares: each test, each trend point, and a tuned
    contrast's chosen pair once it is complete (the options it tuned over are not compared on eval)."""
    plan = study.declaration["analysis"]
    pairs = {(t["method"], t["reference"]) for t in plan.get("tests", [])}
    for c in plan.get("contrasts", []):
        if c["kind"] == "trend":
            pairs |= {(p["method"], p["reference"]) for p in c["points"]}
    for r in contrast_results(study):
        if r["kind"] == "tuned" and r.get("comparison") is not None:
            pairs.add((r["comparison"].method, r["comparison"].reference))
    return pairs


def map_cells(study: Study | None = None, settings: dict[str, Setting] | None = None,
              metric: str | None = None) -> list[Cell]:
    """Every SAPO setting against GRPO at its learning rate and M, in declaration order.

    ``metric`` is what each cell compares (default: the declared endpoint; ``best_dev_eval_pass1``
    reads the best-dev checkpoint instead).
    """
    study = study if study is not None else load_study(STUDY)
    settings = settings if settings is not None else method_settings(study)
    metric = metric or study.declaration["analysis"]["endpoint"]["metric"]
    alpha = study.declaration["analysis"]["alpha"]
    declared = len(study.declaration["seeds"])
    asked = _declared_pairs(study)
    grpo = {(s.learning_rate, s.staleness): s for s in settings.values() if s.loss_type == "grpo"}
    cells = []
    for s in settings.values():
        if s.loss_type != "sapo":
            continue
        ref = grpo.get((s.learning_rate, s.staleness))
        if ref is None:
            raise ValueError(f"gate map: {s.method} has no GRPO method at learning rate {s.learning_rate} and M {s.staleness}")
        pairs = pairs_in_study(study, s.method, ref.method)
        comparison = None
        if len(pairs) == declared:
            values = {p.seed: (endpoint_value(p.method, metric), endpoint_value(p.reference, metric)) for p in pairs}
            comparison = compare(values, s.method, ref.method, alpha)
        cells.append(Cell(s, ref, declared, len(pairs), (s.method, ref.method) in asked, comparison))
    return cells


def declared_answers(study: Study | None = None) -> list[dict]:
    """The declared questions in order (:func:`~sapo_lab.evidence.contrasts.declared_results`), each with ``line``.

    ``line`` answers the question in one line: its comparison, mean and t interval, raw and (within a
    declared family) Holm-adjusted p, and whether it reaches the declared level; or what is still pending.
    """
    study = study if study is not None else load_study(STUDY)
    alpha = study.declaration["analysis"]["alpha"]
    out = []
    for r in declared_results(study):
        if r.get("comparison") is None:
            out.append({**r, "line": f"{r['id']}: {r['status']}"})
            continue
        cmp = r["comparison"]
        what = f"{cmp.method} − {cmp.reference}" if r.get("kind") != "trend" else "slope of the gap on the declared x"
        out.append({**r, "line": f"{r['id']}: {what} = {interval_text(cmp)}, p = {r['p']:.3g}{_level_text(r)} "
                                 f"(α = {alpha})"})
    return out


@dataclass(frozen=True)
class GateStanding:
    """How the complete cells' intervals fall."""

    complete: int
    total: int
    seeds: int
    level: float  # the intervals' confidence level, 1 - alpha
    helps: list[Cell]
    hurts: list[Cell]
    no_difference: list[Cell]

    def sentence(self) -> str:
        """Where on this toy the soft gate helps, hurts or shows no difference, counted from the cells."""
        if self.complete == 0:
            return "No cell of the map is complete yet: the map says nothing so far."

        def where(cells: list[Cell]) -> str:
            if not cells:
                return "in no cell"
            shown = "; ".join(_cell_name(c) for c in cells[:4]) + ("; …" if len(cells) > 4 else "")
            return f"in {len(cells)} ({shown})"

        partial = "" if self.complete == self.total else f" ({self.total - self.complete} cells not yet complete)"
        level = f"{self.level:.0%}"
        per_m = "; ".join(f"M = {m}, {up} above, {down} below, {zero} holding zero"
                          for m, (up, down, zero) in self.by_staleness().items())
        return (
            f"Of the {self.complete} complete cells of the map{partial}, SAPO's gate finishes above GRPO's clip, "
            f"with the {level} interval of the paired gap above zero, {where(self.helps)}; below it, with the "
            f"interval below zero, {where(self.hurts)}; and the interval holds zero {where(self.no_difference)}. "
            f"By staleness: {per_m}. "
            f"Each cell is read alone at {self.seeds} paired seeds, without adjustment for the number of cells: "
            "the declared questions above are the confirmatory reading."
        )

    def by_staleness(self) -> dict[int, tuple[int, int, int]]:
        """Complete cells per M, in increasing M: (above zero, below zero, holding zero)."""
        counts: dict[int, list[int]] = {}
        for i, cells in enumerate((self.helps, self.hurts, self.no_difference)):
            for c in cells:
                counts.setdefault(c.sapo.staleness, [0, 0, 0])[i] += 1
        return {m: tuple(counts[m]) for m in sorted(counts)}


def _cell_name(cell: Cell) -> str:
    return f"τ {cell.sapo.tau_pos:g}, lr {cell.sapo.learning_rate:g}, M {cell.sapo.staleness}"


def where_the_gate_stands(cells: list[Cell], alpha: float = 0.05) -> GateStanding:
    """Sort the complete cells by the side of zero their interval falls on (intervals at level 1 - alpha)."""
    done = [c for c in cells if c.comparison is not None]
    return GateStanding(
        len(done),
        len(cells),
        cells[0].declared_seeds if cells else 0,
        1 - alpha,
        [c for c in done if c.verdict == "helps"],
        [c for c in done if c.verdict == "hurts"],
        [c for c in done if c.verdict == "no difference"],
    )


def _level_text(answer: dict) -> str:
    """"; Holm-adjusted p = ..., reaches the declared level", or that the family's adjustment waits."""
    if answer.get("waiting_for"):
        return f"; its family's Holm adjustment waits for {', '.join(answer['waiting_for'])}"
    adjusted = f", Holm-adjusted p = {answer['p_adjusted']:.3g}" if answer.get("family") else ""
    return f"{adjusted}; {'reaches' if answer['reject'] else 'does not reach'} the declared level"


def _topic(answer: dict, settings: dict[str, Setting]) -> str:
    """What a declared question compares, in words built from the methods' settings."""
    if answer.get("kind") == "trend":
        ms = [settings[p["method"]].staleness for p in answer["points"]]
        per = "doubling of M" if all(p["x"] == math.log2(m) for p, m in zip(answer["points"], ms, strict=True)) else "unit of x"
        lr = settings[answer["points"][0]["method"]].learning_rate
        return f"change of SAPO − GRPO per {per} (M = {', '.join(map(str, ms))}, lr {lr:g})"
    if answer.get("kind") == "tuned":
        ms = sorted({settings[m].staleness for arm in answer["arms"].values() for m in arm})
        return f"SAPO against GRPO at M = {', '.join(map(str, ms))}, each at the learning rate dev chose"
    m = settings[answer["method"]]
    return f"SAPO at τ {m.tau_pos:g} against GRPO, lr {m.learning_rate:g}, M = {m.staleness}"


SIDES = {-1: "SAPO below GRPO", 1: "SAPO above GRPO", 0: "no difference detected"}
TREND_SIDES = {-1: "SAPO − GRPO falls as M grows", 1: "SAPO − GRPO rises as M grows", 0: "no trend detected"}


def answer_bullets(study: Study | None = None, settings: dict[str, Setting] | None = None) -> str:
    """The declared questions as Markdown bullets for the closing chapter: what each compared, its interval, its side.

    A question still running says so. The side of zero is read from the t interval; within a family
    whose Holm adjustment does not reach the level, the side is marked as read before adjustment.
    """
    study = study if study is not None else load_study(STUDY)
    settings = settings if settings is not None else method_settings(study)
    answers = declared_answers(study)
    tested = {(a["method"], a["reference"]): a["id"] for a in answers if "method" in a and "reference" in a}
    lines = []
    for a in answers:
        topic = _topic(a, settings)
        if a.get("comparison") is None:
            lines.append(f"* {a['id']}, {topic}: not yet complete ({a['status']}).")
            continue
        cmp = a["comparison"]
        side = side_of_zero(cmp)
        words = (TREND_SIDES if a.get("kind") == "trend" else SIDES)[side]
        if a.get("family") and side != 0 and a.get("reject") is not True:
            words += " before Holm's adjustment"
        chosen = ""
        if a.get("kind") == "tuned":
            same = tested.get((cmp.method, cmp.reference))
            chosen = f" (chosen: `{cmp.method}` and `{cmp.reference}`" + (f", the runs of {same}" if same else "") + ")"
        lines.append(f"* {a['id']}, {topic}{chosen}: {interval_text(cmp)}, p = {a['p']:.3g}; {words}"
                     f"{_level_text(a)}.")
    return "\n".join(lines)


def plain_answer(study: Study | None = None, settings: dict[str, Setting] | None = None) -> str:
    """The declared questions' answer in three sentences: where SAPO stood, how the gap moved with M, and
    what the narrow gate and the tuned learning rate did. Every clause is chosen by an interval's side."""
    study = study if study is not None else load_study(STUDY)
    settings = settings if settings is not None else method_settings(study)
    answers = {a["id"]: a for a in declared_answers(study)}
    pending = [i for i, a in answers.items() if a.get("comparison") is None]
    if pending:
        return f"The declared answer waits for {', '.join(pending)}."
    sides = {i: side_of_zero(a["comparison"]) for i, a in answers.items()}
    above = [i for i, s in sides.items() if s > 0 and answers[i].get("kind") != "trend"]
    first = ("In no declared comparison did SAPO finish above GRPO." if not above
             else f"SAPO finished above GRPO in {', '.join(above)}.")
    trend = next(a for a in answers.values() if a.get("kind") == "trend")
    by_m = {settings[p["method"]].staleness: next(a for a in answers.values()
                                                  if (a.get("method"), a.get("reference")) == (p["method"], p["reference"]))
            for p in trend["points"]}
    flat = [m for m, a in by_m.items() if side_of_zero(a["comparison"]) == 0]
    kept = [m for m, a in by_m.items() if a["reject"] is True]
    late = [m for m, a in by_m.items() if side_of_zero(a["comparison"]) != 0 and a["reject"] is False]
    moved = TREND_SIDES[sides[trend["id"]]]
    point = settings[trend["points"][0]["method"]]
    ms = sorted(by_m)
    second = (f"{moved[0].upper() + moved[1:]} at lr {rate_text(point.learning_rate)} and τ {point.tau_pos:g}, over M = "
              f"{ms[0]} to {ms[-1]} ({trend['id']}: {interval_text(trend['comparison'])} per doubling of M)"
              + (f"; at M = {', '.join(map(str, flat))} no difference was detected ("
                 + "; ".join(f"{by_m[m]['id']}: {interval_text(by_m[m]['comparison'])}" for m in flat) + ")"
                 if flat else "")
              + (f"; at M = {', '.join(map(str, late))} the gap lies on one side of zero before Holm's "
                 "adjustment, not after" if late else "")
              + (f", and at M = {', '.join(map(str, kept))} the gap reaches the declared level after Holm's "
                 "adjustment" if kept else "") + ".")

    def outcome(test_id: str) -> str:
        a = answers[test_id]
        word = {-1: "left SAPO below GRPO", 0: "left no detectable gap", 1: "put SAPO above GRPO"}[sides[test_id]]
        return f"{word} ({test_id}: {interval_text(a['comparison'])})"

    tight = next(i for i, a in answers.items() if "method" in a and settings[a["method"]].tau_pos == max(
        s.tau_pos for s in settings.values() if s.loss_type == "sapo"))
    tuned = next(i for i, a in answers.items() if a.get("kind") == "tuned")
    sapo_lr, grpo_lr = (settings[m].learning_rate for m in (answers[tuned]["comparison"].method,
                                                            answers[tuned]["comparison"].reference))
    chose = f"both chose {sapo_lr:g}" if sapo_lr == grpo_lr else f"SAPO chose {sapo_lr:g}, GRPO {grpo_lr:g}"
    third = (f"A gate as narrow as the clip {outcome(tight)}, and a learning rate chosen per method on dev "
             f"({chose}) {outcome(tuned)}.")
    return " ".join([first, second, third])
