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

from dataclasses import dataclass

from ..objective.kernels import sapo_half_width
from .analysis import endpoint_value, pairs_in_study
from .contrasts import declared_results
from .narrative import interval_text
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
        """"helps" / "hurts" when the 95% t interval excludes zero on that side, "no difference" when it holds zero."""
        if self.comparison is None:
            return None
        lo, hi = self.comparison.t_interval
        return "helps" if lo > 0 else "hurts" if hi < 0 else "no difference"


def method_settings(declaration: dict) -> dict[str, Setting]:
    """Each declared method's loss type, temperatures, learning rate and M, from its resolved config."""
    from .expansion import expand_runs

    out = {}
    for run in expand_runs(declaration):
        if run["method"] in out:
            continue
        cfg = run["config"]
        out[run["method"]] = Setting(
            run["method"],
            cfg.loss.loss_type,
            cfg.loss.sapo_temperature_pos,
            cfg.loss.sapo_temperature_neg,
            cfg.optimization.learning_rate,
            cfg.optimization.steps_per_generation,
        )
    return out


def _declared_pairs(declaration: dict) -> set[tuple[str, str]]:
    """(method, reference) of every declared question, including each point of a trend and each tuned arm's options."""
    plan = declaration["analysis"]
    pairs = {(t["method"], t["reference"]) for t in plan.get("tests", [])}
    for c in plan.get("contrasts", []):
        if c["kind"] == "trend":
            pairs |= {(p["method"], p["reference"]) for p in c["points"]}
        elif c["kind"] == "tuned":
            first, second = c["arms"].values()
            pairs |= set(zip(first, second, strict=True))
    return pairs


def map_cells(study: Study | None = None, settings: dict[str, Setting] | None = None) -> list[Cell]:
    """Every SAPO setting against GRPO at its learning rate and M, in declaration order."""
    study = study if study is not None else load_study(STUDY)
    settings = settings if settings is not None else method_settings(study.declaration)
    metric = study.declaration["analysis"]["endpoint"]["metric"]
    alpha = study.declaration["analysis"]["alpha"]
    declared = len(study.declaration["seeds"])
    asked = _declared_pairs(study.declaration)
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
    """The declared questions in order (:func:`~sapo_lab.studies.contrasts.declared_results`), each with ``line``.

    ``line`` answers the question in one line: its comparison, mean and 95% t interval, raw and
    (within a declared family) Holm-adjusted p, and whether it reaches the declared level; or what
    is still pending.
    """
    study = study if study is not None else load_study(STUDY)
    out = []
    for r in declared_results(study):
        if r.get("comparison") is None:
            out.append({**r, "line": f"{r['id']}: {r['status']}"})
            continue
        cmp = r["comparison"]
        what = f"{cmp.method} − {cmp.reference}" if r.get("kind") != "trend" else "slope of the gap per doubling of M"
        out.append({**r, "line": f"{r['id']}: {what} = {interval_text(cmp)}, p = {r['p']:.3g}{_level_text(r)} "
                                 f"(α = {study.declaration['analysis']['alpha']})"})
    return out


@dataclass(frozen=True)
class GateStanding:
    """How the complete cells' intervals fall, overall and for the declared cells."""

    complete: int
    total: int
    seeds: int
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
            shown = ", ".join(_cell_name(c) for c in cells[:4]) + (", …" if len(cells) > 4 else "")
            return f"in {len(cells)} ({shown})"

        partial = "" if self.complete == self.total else f" ({self.total - self.complete} cells still running)"
        return (
            f"Of the {self.complete} complete cells of the map{partial}, SAPO's gate finishes above GRPO's clip, "
            f"with the 95% interval of the paired gap above zero, {where(self.helps)}; below it, with the interval "
            f"below zero, {where(self.hurts)}; and the interval holds zero {where(self.no_difference)}. "
            f"Each cell is read alone at {self.seeds} paired seeds, without adjustment for the number of cells: "
            "the declared questions above are the confirmatory reading."
        )


def _cell_name(cell: Cell) -> str:
    return f"τ {cell.sapo.tau_pos:g}, lr {cell.sapo.learning_rate:g}, M {cell.sapo.staleness}"


def where_the_gate_stands(cells: list[Cell]) -> GateStanding:
    """Sort the complete cells by the side of zero their interval falls on."""
    done = [c for c in cells if c.comparison is not None]
    return GateStanding(
        len(done),
        len(cells),
        cells[0].declared_seeds if cells else 0,
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


def _side(comparison) -> str:
    lo, hi = comparison.t_interval
    if hi < 0:
        return "SAPO below GRPO"
    if lo > 0:
        return "SAPO above GRPO"
    return "no difference detected"


def answer_bullets(study: Study | None = None) -> str:
    """The declared questions as Markdown bullets for the closing chapter: what each compared, its interval, its side.

    A question still running says so. The side of zero is read from the 95% t interval; whether
    it reaches the declared level (Holm within a family) is stated beside it, since the two can part.
    """
    study = study if study is not None else load_study(STUDY)
    topics = {
        "G1": "a gate as narrow as the clip (τ ×8.81) against GRPO at M = 8",
        "G2": "the gate between (τ ×3) against GRPO at M = 8",
        "G3": "SAPO against GRPO at M = 8, each with its own learning rate chosen on dev",
        "G4a": "SAPO against GRPO at M = 2",
        "G4b": "SAPO against GRPO at M = 4",
        "G4c": "SAPO against GRPO at M = 8 (fresh seeds)",
        "G4d": "SAPO against GRPO at M = 16",
        "G5": "change of the gap per doubling of M",
    }
    lines = []
    for a in declared_answers(study):
        topic = topics.get(a["id"], a["id"])
        if a.get("comparison") is None:
            lines.append(f"* {a['id']}, {topic}: still running ({a['status']}).")
            continue
        cmp = a["comparison"]
        if a.get("kind") == "trend":
            lo, hi = cmp.t_interval
            side = "SAPO − GRPO falls as M grows" if hi < 0 else "SAPO − GRPO rises as M grows" if lo > 0 else "no trend detected"
        else:
            side = _side(cmp)
        chosen = ""
        if a.get("kind") == "tuned":
            chosen = f" (chosen: `{a['chosen']['sapo']}` and `{a['chosen']['grpo']}`)"
        lines.append(f"* {a['id']}, {topic}{chosen}: {interval_text(cmp)}, p = {a['p']:.3g}; {side}"
                     f"{_level_text(a)}.")
    return "\n".join(lines)
