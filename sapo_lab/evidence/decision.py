"""Should I use SAPO? The answer as a table of regimes and a few plain sentences, built from the studies.

Each row of the decision table is one regime (the staleness M, how the learning rate and the
checkpoint were chosen) with the paired SAPO − GRPO gap in final held-out Pass@1 and its 95% t
interval, read as *declared* (a question fixed before the runs, with its Holm adjustment) or
*exploratory* (a reading the declaration listed, taken alone). The sentences are chosen by the
rows' intervals; each names the regime it holds in, and :func:`unsaid_answers` names every
declared answer the text leaves out (:func:`decision` refuses to return such a text).

* :func:`evidence` -- the rows, the map's cells and the collapse counts, read from ``results/``;
* :func:`reading` -- one row's verdict in words ("below zero before adjustment, not after"...);
* :func:`decision_table` / :func:`decision_sentences` / :func:`decision` -- the generated answer.

The functions below :func:`evidence` are pure: tests give them planted rows and cells.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from ..runs.identity import run_identity
from .confirmatory import CONFIRMATORY, confirmatory_results, interval_text
from .confirmatory import rate_text as _rate
from .gate_map import STUDY, Cell, Setting, declared_answers, map_cells, method_settings, side_of_zero
from .paired import PairedComparison
from .results import Study, load_study

MODEL = "a 1M-parameter GPT-2"  # the cpu-tiny preset's model, as the confirmatory sentences name it (Chapter 11a)


@dataclass(frozen=True)
class Row:
    """One regime's SAPO − GRPO gap (or, for ``kind == "slope"``, the gap's change per doubling of M)."""

    id: str  # a declared answer's id, or an exploratory reading's label
    study: str
    task: str
    tau_pos: float | None  # SAPO's positive temperature; None when chosen on dev
    staleness: tuple[int, ...]  # M of the row's cells
    rates: tuple[float, float] | None  # (SAPO's, GRPO's) learning rate
    rate_rule: str  # "shared" (one rate for both) or "dev" (each method's chosen on dev)
    checkpoint: str  # "final" or "best dev"
    comparison: PairedComparison
    declared: bool
    kind: str = "gap"  # "gap" or "slope"
    family: str | None = None
    p_adjusted: float | None = None
    reject: bool | None = None
    tuned_gate: bool = False  # the temperature and the clip were chosen on dev (confirm_addition's Q4)
    replicates: str | None = None  # the declared answer whose runs this row repeats on fresh seeds
    seeds: tuple[int, ...] = field(default=())
    steps: int | None = None  # rollout steps each run trained for (the runs' max_steps)

    @property
    def side(self) -> int:
        """+1 / -1 when the interval lies above / below zero, 0 when it holds zero."""
        return side_of_zero(self.comparison)

    def scope(self) -> str:
        """The regime in words: task, M, gate, learning rate and checkpoint."""
        ms = ", ".join(map(str, self.staleness))
        gate = "τ, ε chosen on dev" if self.tuned_gate else f"τ {self.tau_pos:g}"
        return f"{self.task.replace('_', ' ')}, M = {ms}, {gate}, {self.rate_text()}, {self.checkpoint} checkpoint"

    def rate_text(self) -> str:
        """``lr 2e-4 shared`` or ``lr on dev (SAPO 1e-4, GRPO 1e-4)``."""
        if self.rate_rule == "shared":
            return f"lr {self.rate_values()} shared"
        return f"lr on dev ({self.rate_values()})"

    def rate_values(self) -> str:
        """``2e-4`` for a shared rate, ``SAPO 1e-4, GRPO 1e-4`` for rates chosen per method."""
        sapo, grpo = self.rates
        return _rate(sapo) if self.rate_rule == "shared" else f"SAPO {_rate(sapo)}, GRPO {_rate(grpo)}"


def reading(row: Row, original: Row | None = None) -> str:
    """The row's verdict: its interval's side, whether it is declared, and, for a declared answer in a
    family, whether the side survives Holm's adjustment; with ``original`` (the answer the row repeats on
    fresh seeds) whether the repeat reached the original's level."""
    if row.kind == "slope":
        what = {-1: "falls as M grows", 1: "rises as M grows", 0: "no trend detected"}[row.side]
    else:
        what = {-1: "below zero", 1: "above zero", 0: "holds zero"}[row.side]
    if not row.declared:
        return f"exploratory: {what}"
    if row.side != 0 and row.reject is False:
        what += " before adjustment, not after" if row.family else ", not at the declared level"
    elif row.side != 0 and row.reject:
        what += ", at the declared level"
    text = f"declared: {what}"
    if original is not None and original.reject and not row.reject:
        text += f"; {original.id} reached it: the fresh-seed repeat did not"
    return text


def decision_table(rows: list[Row]) -> str:
    """The rows as a Markdown table: the regime, the gap with its interval, the reading."""
    by_id = {r.id: r for r in rows}
    lines = ["| answer | task | M | learning rate | checkpoint | SAPO − GRPO, 95% CI | reading |",
             "|---|---|--:|---|---|---|---|"]
    for r in rows:
        gate = " (τ, ε on dev)" if r.tuned_gate else "" if r.tau_pos == 1.0 else f" (τ {r.tau_pos:g})"
        gap = interval_text(r.comparison) + (" per doubling" if r.kind == "slope" else "")
        ms = f"{r.staleness[0]}–{r.staleness[-1]}" if len(r.staleness) > 1 else str(r.staleness[0])
        rule = r.rate_values() + (" shared" if r.rate_rule == "shared" else " on dev")
        lines.append(f"| {r.id}{gate} | {r.task.replace('_', ' ')} | {ms} | {rule} | {r.checkpoint} "
                     f"| {gap} | {reading(r, by_id.get(r.replicates))} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Evidence:
    """What the decision is generated from: the rows, the map's cells and its collapse flags."""

    rows: list[Row]
    cells: list[Cell]  # every cell of the gate map on the endpoint (exploratory, one at a time)
    collapse: dict[tuple[float, int], dict[str, tuple[int, int]]]  # (lr, M) at τ 1 -> loss -> (flagged, runs)
    scale: str
    declared: dict[str, str]  # every declared answer of the studies, in order: id -> its interval text


def _joined(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _said(row: Row) -> str:
    """``G4b: −0.036 [−0.063, −0.008]``, with the qualifier when the side does not survive Holm's adjustment."""
    late = ", below zero before adjustment, not after" if row.side != 0 and row.reject is False and row.family else ""
    return f"{row.id}: {interval_text(row.comparison)}{late}"


def _ms(values) -> str:
    return "M = " + _joined([str(m) for m in values])


def _where_sentence(ev: Evidence, map_rows: list[Row], confirm_rows: list[Row]) -> str:
    """Where SAPO showed no difference and where it trailed, each with its M, gate, rate and id."""
    paper = [r for r in map_rows if r.tau_pos == 1.0]
    tied = [r for r in paper if r.side == 0]
    clauses = []
    if tied:
        clauses.append(f"SAPO and GRPO showed no detectable difference at {_ms([r.staleness[0] for r in tied])} "
                       f"with {tied[0].rate_text()} ({'; '.join(_said(r) for r in tied)})")
    smallest = min((c.sapo.learning_rate for c in ev.cells), default=None)
    if smallest is not None:
        at = [c for c in ev.cells if c.sapo.learning_rate == smallest and c.comparison is not None]
        counts = [sum(side_of_zero(c.comparison) == k for c in at) for k in (1, -1, 0)]
        clauses.append(f"at the map's smallest learning rate, {_rate(smallest)}, every one of its {len(at)} cells "
                       f"({_ms(sorted({c.sapo.staleness for c in at}))}, every τ) kept the gap within "
                       f"±{max(abs(c.comparison.mean) for c in at):.3f} (exploratory: {counts[0]} above zero, "
                       f"{counts[1]} below, {counts[2]} holding zero)")
    below = [r for r in paper if r.side < 0]
    trailed = []
    if below:
        trailed.append(f"at {_ms([r.staleness[0] for r in below])} ({'; '.join(_said(r) for r in below)})")
    narrow = [r for r in map_rows if r.tau_pos != 1.0 and r.side < 0]
    if narrow:
        trailed.append(f"with narrower gates at {_ms(sorted({r.staleness[0] for r in narrow}))} ("
                       + "; ".join(f"τ {r.tau_pos:g}, {_said(r)}" for r in narrow) + ")")
    conf = [r for r in confirm_rows if r.side < 0]
    map_steps = {r.steps for r in map_rows}
    if conf:  # a study trained for another number of steps than the map's scale says names its own
        trailed.append("and in the confirmatory studies (" + "; ".join(
            f"{r.task.replace('_', ' ')} at M = {r.staleness[0]}"
            + (f" after {r.steps} rollout steps" if r.steps is not None and r.steps not in map_steps else "")
            + f", {_said(r)}" for r in conf) + ")")
    rates = sorted({r.rates[0] for r in below + narrow + conf})
    if trailed:
        clauses.append(f"with the shared lr {_joined([_rate(x) for x in rates])} SAPO trailed " + ", ".join(trailed))
    else:
        clauses.append("SAPO trailed GRPO in no declared comparison at a shared learning rate")
    text = f"On {ev.scale}: " + "; ".join(clauses) + "."
    return text


def _trend_sentence(slopes: list[Row]) -> str:
    """How the gap moved with M: the declared slope, and the exploratory slopes at the other rates and M."""
    out = []
    for s in (s for s in slopes if s.declared):
        verdict = {-1: "grew", 1: "shrank", 0: "did not move detectably"}[s.side]
        text = (f"The gap {verdict} with M at lr {_rate(s.rates[0])} over M = {s.staleness[0]} to "
                f"{s.staleness[-1]} ({s.id}: {interval_text(s.comparison)} per doubling of M)")
        flat = [o for o in slopes if not o.declared and o.side == 0]
        if flat:
            text += ", but no trend was detected " + _joined([
                f"at lr {_rate(o.rates[0])} over M = {o.staleness[0]} to {o.staleness[-1]} "
                f"({interval_text(o.comparison)})" for o in flat]) + " (exploratory)"
        out.append(text + ".")
    return " ".join(out)


def _tuning_sentence(ev: Evidence, map_rows: list[Row], tuned: list[Row], confirm_rows: list[Row]) -> str:
    """What choosing the learning rate on dev did, at the declared M and at the others, and what M = 16 was made of."""
    parts = []
    shared = {r.staleness: r for r in map_rows if r.tau_pos == 1.0}
    for r in (r for r in tuned if r.declared):
        base = shared.get(r.staleness)
        if base is None:
            continue
        share = 1 - r.comparison.mean / base.comparison.mean if base.comparison.mean else float("nan")
        clause = (f"choosing each method's learning rate on dev at M = {r.staleness[0]} ({r.rate_values()}) "
                  f"moved the gap from {interval_text(base.comparison)} ({base.id}) to "
                  f"{interval_text(r.comparison)} ({r.id}, {reading(r)})"
                  + (f", {share:.0%} of it closed" if 0 < share < 1 else ""))
        for b in tuned:
            if not b.declared and b.staleness == r.staleness and b.checkpoint != r.checkpoint:
                clause += f", and at the {b.checkpoint} checkpoint to {interval_text(b.comparison)} ({reading(b)})"
        parts.append(clause)
    for r in (r for r in tuned if not r.declared and r.checkpoint == "final"):
        base = shared.get(r.staleness)
        if base is None or base.side == 0:
            continue
        flags = ev.collapse.get((base.rates[0], r.staleness[0]), {})
        clause = (f"at M = {r.staleness[0]} the same rule ({r.rate_values()}) gives "
                  f"{interval_text(r.comparison)} ({reading(r)}) against {base.id}'s {interval_text(base.comparison)}")
        if "sapo" in flags and "grpo" in flags:
            (sf, sn), (gf, gn) = flags["sapo"], flags["grpo"]
            clause += (f", and at lr {_rate(base.rates[0])} the collapse rule flagged {sf} of {sn} SAPO runs against "
                       f"{gf} of {gn} GRPO runs")
            if r.side == 0 and sf > gf and abs(r.comparison.mean) < abs(base.comparison.mean) / 2:
                clause += f": most of M = {r.staleness[0]}'s gap goes with SAPO's instability at the shared rate"
        parts.append(clause)
    for r in (r for r in confirm_rows if r.tuned_gate):
        parts.append(f"tuning each method's own gate on dev instead ({r.rate_text()}, M = {r.staleness[0]}) "
                     f"left {interval_text(r.comparison)} ({r.id}, {reading(r)})")
    if not parts:
        return ""
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


def _replication_sentence(rows: list[Row], mechanism: list[Row]) -> str:
    """Fresh-seed repeats of a declared answer and whether they reached its level, and the mechanism family."""
    by_id = {r.id: r for r in rows}
    out = []
    for r in rows:
        original = by_id.get(r.replicates)
        if original is None:
            continue
        reached = "reached" if r.reject or not original.reject else "did not reach"
        out.append(f"{r.id} repeats {original.id}'s runs exactly on fresh seeds ({r.seeds[0]}–{r.seeds[-1]} for "
                   f"{original.seeds[0]}–{original.seeds[-1]}) and {reached} the level of the original: "
                   f"{_said(r)} (Holm-adjusted p = {r.p_adjusted:.3f}) against {_said(original)}.")
    if mechanism:
        survivors = [m.id for m in mechanism if m.reject]
        raw = [m.id for m in mechanism if m.side != 0 and not m.reject]
        out.append(f"Why SAPO trails stays open: of the mechanism family that splits Q1 "
                   f"({'; '.join(f'{m.id}: {interval_text(m.comparison)}' for m in mechanism)}), "
                   + ("none reaches the declared level after Holm's adjustment" if not survivors
                      else f"{_joined(survivors)} {'reaches' if len(survivors) == 1 else 'reach'} the declared level")
                   + (f" ({_joined(raw)} below zero before adjustment, not after)" if raw else "") + ".")
    return " ".join(out)


def unsaid_answers(text: str, declared: dict[str, str]) -> list[str]:
    """The declared answers (``{id: its interval text}``) that no line or sentence of ``text`` states: one that
    names the id as a whole word (``G4`` is not ``G4c``) together with that answer's own interval."""
    pieces = [p for line in text.splitlines() for p in re.split(r"(?<=\.) (?=[A-Z])", line)]
    return [i for i, interval in declared.items()
            if not any(re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", p) and interval in p for p in pieces)]


def decision_sentences(ev: Evidence) -> str:
    """The plain sentences under the table: where SAPO tied and trailed, how the gap moved with M, what tuning
    did, and which declared answers a fresh-seed repeat or Holm's adjustment qualifies."""
    gaps = [r for r in ev.rows if r.kind == "gap"]
    mechanism_ids = _mechanism_ids(ev)
    map_rows = sorted([r for r in gaps if r.declared and r.study == STUDY and r.rate_rule == "shared"
                       and r.checkpoint == "final"], key=lambda r: (r.tau_pos, r.staleness))
    confirm_rows = [r for r in gaps if r.declared and r.study != STUDY and r.id not in mechanism_ids]
    plain_confirm = [r for r in confirm_rows if not r.tuned_gate]
    tuned = [r for r in gaps if r.rate_rule == "dev"]
    slopes = [r for r in ev.rows if r.kind == "slope"]
    mechanism = [r for r in ev.rows if r.id in mechanism_ids]
    # one bullet a topic (where it tied and trailed, the trend, tuning, repeats): a reader scans, not parses
    return "\n".join(f"* {s}" for s in (_where_sentence(ev, map_rows, plain_confirm), _trend_sentence(slopes),
                                        _tuning_sentence(ev, map_rows, tuned, confirm_rows),
                                        _replication_sentence(ev.rows, mechanism)) if s)


def _mechanism_ids(ev: Evidence) -> set[str]:
    return {r.id for r in ev.rows if r.family == "mechanism"}


def decision(ev: Evidence | None = None) -> str:
    """The table and the sentences, in Markdown; a ``ValueError`` naming any declared answer left unsaid."""
    ev = ev if ev is not None else evidence()
    text = decision_table([r for r in ev.rows if r.family != "mechanism"]) + "\n\n" + decision_sentences(ev)
    missing = unsaid_answers(text, ev.declared)
    if missing:
        raise ValueError(f"the decision leaves declared answers unsaid: {', '.join(missing)}")
    return text


# ---------------------------------------------------------------- reading the committed studies


def _identity_without_seed(study: Study, method: str) -> str:
    config = run_identity(study.select(method)[0].config)
    config.pop("seed", None)
    return json.dumps(config, sort_keys=True)


def _row_from_runs(entry: dict, study: Study, declared: bool = True, **extra) -> Row:
    """A declared test's row: the regime read from its method's and reference's saved configs."""
    cmp = entry["comparison"]
    m, r = study.select(cmp.method)[0].config, study.select(cmp.reference)[0].config
    return Row(id=entry["id"], study=study.name, task=m["task"]["name"], tau_pos=m["loss"]["sapo_temperature_pos"],
               staleness=(m["optimization"]["steps_per_generation"],),
               rates=(m["optimization"]["learning_rate"], r["optimization"]["learning_rate"]),
               rate_rule="shared" if m["optimization"]["learning_rate"] == r["optimization"]["learning_rate"]
               and "tuned" != entry.get("kind") else "dev",
               checkpoint="final", comparison=cmp, declared=declared, family=entry.get("family"),
               p_adjusted=entry.get("p_adjusted"), reject=entry.get("reject"),
               seeds=tuple(cmp.seeds), steps=m["optimization"]["max_steps"], **extra)


def evidence(root=None) -> Evidence:
    """The decision's inputs from the committed studies: the confirmatory answers, the gate map's declared
    answers and its exploratory readings (:mod:`.exploratory`)."""
    from . import exploratory  # it imports this module's neighbours only, not this module

    confirm = confirmatory_results(root)
    pending = [i for i, e in confirm.items() if e.get("comparison") is None]
    studies = {name: load_study(name, root) for name in CONFIRMATORY}
    gate_map = load_study(STUDY, root)
    settings = method_settings(gate_map)
    answers = declared_answers(gate_map)
    pending += [a["id"] for a in answers if a.get("comparison") is None]
    if pending:
        raise ValueError(f"the decision waits for {', '.join(pending)}")
    rows = []
    for entry in confirm.values():
        study = studies[entry["study"]]
        if entry.get("arms"):  # the tuned gate: each method's temperature or clip chosen on dev, one shared rate
            rows.append(replace(_row_from_runs(entry, study), tuned_gate=True, rate_rule="shared"))
        else:
            rows.append(_row_from_runs(entry, study))
    originals = {_identity_without_seed(studies[e["study"]], e["comparison"].method)
                 + _identity_without_seed(studies[e["study"]], e["comparison"].reference): qid
                 for qid, e in confirm.items() if not e.get("arms")}
    cells = map_cells(gate_map, settings)
    for a in answers:
        if a.get("kind") == "trend":
            continue
        row = _row_from_runs(a, gate_map)
        key = _identity_without_seed(gate_map, a["comparison"].method) + _identity_without_seed(
            gate_map, a["comparison"].reference)
        rows.append(replace(row, replicates=originals.get(key)))
    for t in exploratory.tuned_by_staleness(gate_map, settings, metric=exploratory.BEST_DEV):
        if t.staleness in {r.staleness[0] for r in rows if r.study == STUDY and r.rate_rule == "dev"}:
            rows.append(_tuned_row(t, gate_map, settings, "best dev"))
    for t in exploratory.tuned_by_staleness(gate_map, settings):
        if not t.declared and set(t.rates.values()) != {_shared_rate(answers, settings)}:
            rows.append(_tuned_row(t, gate_map, settings, "final"))
    trend = next(a for a in answers if a.get("kind") == "trend")
    declared_slope = exploratory.slope_at(gate_map, settings, learning_rate=_shared_rate(answers, settings),
                                          cells=cells)
    rows.append(_slope_row(trend["id"], declared_slope, gate_map, trend))
    for lr in sorted({s.learning_rate for s in settings.values()}):
        if lr != declared_slope.learning_rate:
            s = exploratory.slope_at(gate_map, settings, learning_rate=lr, cells=cells)
            rows.append(_slope_row(f"slope at lr {_rate(lr)}", s, gate_map))
    shorter = declared_slope.staleness[:-1]
    s = exploratory.slope_at(gate_map, settings, learning_rate=declared_slope.learning_rate, staleness=shorter,
                             cells=cells)
    rows.append(_slope_row(f"slope over M ≤ {shorter[-1]}", s, gate_map))
    flags = exploratory.collapse_counts(gate_map)
    collapse: dict = {}
    for m, s in settings.items():
        if s.tau_pos == 1.0 or s.loss_type == "grpo":
            collapse.setdefault((s.learning_rate, s.staleness), {})[s.loss_type] = (flags.flagged[m], flags.runs[m])
    plan = gate_map.declaration
    scale = (f"{MODEL} ({plan['preset']}), {plan['budget']['max_steps']} rollout steps, "
             f"{len(plan['seeds'])} paired seeds")
    declared = {**{i: interval_text(e["comparison"]) for i, e in confirm.items()},
                **{a["id"]: interval_text(a["comparison"]) for a in answers}}
    return Evidence(rows, cells, collapse, scale, declared)


def _shared_rate(answers: list[dict], settings: dict[str, Setting]) -> float:
    """The learning rate of the declared trend's points (the rate every earlier study shared)."""
    trend = next(a for a in answers if a.get("kind") == "trend")
    return settings[trend["points"][0]["method"]].learning_rate


def _tuned_row(t, study: Study, settings: dict[str, Setting], checkpoint: str) -> Row:
    return Row(id=f"G3's rule at M = {t.staleness}" if checkpoint == "final" else f"G3 at {checkpoint}",
               study=study.name, task=study.select(t.picks["sapo"])[0].config["task"]["name"],
               tau_pos=settings[t.picks["sapo"]].tau_pos, staleness=(t.staleness,),
               rates=(t.rates["sapo"], t.rates["grpo"]), rate_rule="dev", checkpoint=checkpoint,
               comparison=t.comparison, declared=False, seeds=tuple(t.comparison.seeds))


def _slope_row(label: str, slope, study: Study, answer: dict | None = None) -> Row:
    return Row(id=label, study=study.name, task=study.runs[0].config["task"]["name"], tau_pos=slope.tau_pos,
               staleness=slope.staleness, rates=(slope.learning_rate, slope.learning_rate), rate_rule="shared",
               checkpoint="final", comparison=slope.comparison, declared=slope.declared, kind="slope",
               p_adjusted=(answer or {}).get("p_adjusted"), reject=(answer or {}).get("reject"),
               seeds=tuple(slope.comparison.seeds))
