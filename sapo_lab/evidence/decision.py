"""Should I use SAPO? The answer in one sentence, a table of regimes and a few plain sentences, built from the studies.

Each row of the decision table is one regime (the staleness M, the rollout steps, how the learning
rate and the checkpoint were chosen) with both methods' mean held-out Pass@1, the paired SAPO − GRPO
gap and its 95% t interval, the runs the declared collapse rule flagged, read as *declared* (a
question fixed before the runs, with its Holm adjustment) or *exploratory* (a reading the
declaration listed, taken alone). The answer sentence counts the declared comparisons by the side
of zero their interval falls on; every other sentence is chosen by the rows' intervals and names the
regime it holds in, and :func:`unsaid_answers` names every declared answer the text leaves out
(:func:`decision` refuses to return such a text).

* :func:`evidence` -- the rows, the map's cells, the levels, the collapse counts and the committed
  replications, read from ``results/``;
* :func:`reading` -- one row's verdict in words ("below zero before adjustment, not after"...);
* :func:`answer_sentence` -- the choice a practitioner can act on, counted from the declared rows;
* :func:`decision_table` / :func:`decision_sentences` / :func:`decision` -- the generated answer;
* :func:`readme_findings` -- the README's five findings lines; :func:`where_answered` -- the scope the
  declared studies answer for (chapter 16's "What remains open").

The functions below :func:`evidence` are pure: tests give them planted rows and cells.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..runs.identity import run_identity
from ..runs.study_folder import StudyFolder
from .analysis import endpoint_value
from .confirmatory import CONFIRMATORY, confirmatory_results, headline_sentence, interval_text
from .confirmatory import rate_text as _rate
from .gate_map import STUDY, Cell, Setting, declared_answers, map_cells, method_settings, side_of_zero
from .paired import PairedComparison, compare
from .results import Study, load_study, results_root

MODEL = "a 1M-parameter GPT-2"  # the cpu-tiny preset's model, as the confirmatory sentences name it (Chapter 11a)
CHAPTER_16 = "book/16_conclusion.ipynb"  # where the README's findings send the reader for the table
SIDE_WORDS = {-1: "below zero", 1: "above zero", 0: "holds zero"}  # an interval's side of zero, as read


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
    levels: tuple[float, float] | None = None  # seed-mean Pass@1 of SAPO and of GRPO on the row's checkpoint
    flagged: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # seeds whose SAPO / GRPO run was flagged
    same_runs: str | None = None  # the declared answer whose very runs and endpoint this reading compares
    alpha: float = 0.05  # the level its study declared
    kernels: tuple[str, ...] = ()  # the CPU kernel fingerprints its study's runs were made on (none recorded: empty)

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

    def flag_counts(self) -> tuple[int, int, int] | None:
        """(SAPO runs flagged, GRPO runs flagged, runs per method) over the row's seeds; None when unread."""
        if self.flagged is None:
            return None
        return len(self.flagged[0]), len(self.flagged[1]), len(self.comparison.seeds)

    def flag_split(self) -> tuple[float, float] | None:
        """The mean gap at seeds whose SAPO run was flagged, and at the others; None unless both sets are seen."""
        if self.flagged is None:
            return None
        by_seed = dict(zip(self.comparison.seeds, self.comparison.differences, strict=True))
        hit = [d for s, d in by_seed.items() if s in self.flagged[0]]
        rest = [d for s, d in by_seed.items() if s not in self.flagged[0]]
        return (statistics.mean(hit), statistics.mean(rest)) if hit and rest else None


def reading(row: Row, original: Row | None = None) -> str:
    """The row's verdict: its interval's side, whether it is declared, and, for a declared answer in a
    family, whether the side survives Holm's adjustment; with ``original`` (the answer the row repeats on
    fresh seeds) how the repeat's level compares with the original's."""
    if row.kind == "slope":
        what = {-1: "falls as M grows", 1: "rises as M grows", 0: "no trend detected"}[row.side]
    else:
        what = {-1: "below zero", 1: "above zero", 0: "holds zero"}[row.side]
    if not row.declared:
        if row.same_runs:
            return f"exploratory: dev kept the shared rate, so these are {row.same_runs}'s runs"
        return f"exploratory: {what}"
    if row.side != 0 and row.reject is False:
        what += " before adjustment, not after" if row.family else ", not at the declared level"
    elif row.side != 0 and row.reject:
        what += ", at the declared level"
    text = f"declared: {what}"
    if original is not None and original.reject and not row.reject:
        if row.comparison.t_p <= row.alpha and row.family and row.p_adjusted is not None:
            text += (f"; its declared test, Holm-adjusted within the {row.family} family, fails (p "
                     f"{row.p_adjusted:.3f}); raw p {row.comparison.t_p:.3f} is shown for comparison with "
                     f"{original.id}'s single test at α {original.alpha:g}, not as a confirmation")
        elif row.comparison.t_p <= row.alpha:
            text += f"; raw p {row.comparison.t_p:.3f} meets the α {row.alpha:g} at which {original.id} was tested alone"
        else:
            text += f"; {original.id} reached it: the fresh-seed repeat did not"
    return text


def _levels_text(row: Row) -> str:
    return "" if row.levels is None else f"{row.levels[0]:.3f} | {row.levels[1]:.3f}"


def _flags_text(row: Row) -> str:
    counts = row.flag_counts()
    return "" if counts is None else f"{counts[0]} / {counts[1]} of {counts[2]}"


def decision_table(rows: list[Row]) -> str:
    """The rows as a Markdown table, declared answers first: the regime, both methods' Pass@1, the gap with its
    interval, the collapse-flagged runs (exploratory: counted, not tested) and the reading."""
    by_id = {r.id: r for r in rows}
    lines = ["| answer | task | M | steps | learning rate | checkpoint | SAPO Pass@1 | GRPO Pass@1 "
             "| SAPO − GRPO, 95% CI | collapse-flagged runs, SAPO / GRPO (exploratory) | reading |",
             "|---|---|--:|--:|---|---|--:|--:|---|---|---|"]
    for r in sorted(rows, key=lambda r: not r.declared):  # stable: each group keeps its order
        gate = " (τ, ε on dev)" if r.tuned_gate else "" if r.tau_pos == 1.0 else f" (τ {r.tau_pos:g})"
        gap = interval_text(r.comparison) + (" per doubling" if r.kind == "slope" else "")
        ms = f"{r.staleness[0]}–{r.staleness[-1]}" if len(r.staleness) > 1 else str(r.staleness[0])
        rule = r.rate_values() + (" shared" if r.rate_rule == "shared" else " on dev")
        levels = _levels_text(r) or " | "
        lines.append(f"| {r.id}{gate} | {r.task.replace('_', ' ')} | {ms} | {r.steps or ''} | {rule} "
                     f"| {r.checkpoint} | {levels} | {gap} | {_flags_text(r)} | {reading(r, by_id.get(r.replicates))} |")
    return "\n".join(lines)


# The verdicts of ``sapo_lab/studies/replicate.py`` (its docstring declares them) in a few words; evidence may not
# import studies, so a test holds these words to that module's ``verdict`` on planted answers.
VERDICT_RULES = {
    "identical": "the same kernels and every endpoint value equal",
    "consistent": "the two 95% intervals overlap and the replication's mean lies on the committed mean's side of zero",
    "not consistent": "the two 95% intervals do not overlap, or the replication's mean lies on the other side of zero",
}


@dataclass(frozen=True)
class Replication:
    """A committed re-run of one declared question on other CPU kernels (``results/replications/``)."""

    study: str
    question: str
    comparison: dict  # the replication's mean, t_interval and p
    verdict: str
    kernels: str  # the replication's kernel fingerprint, from its environment.json
    setting: str | None  # the kernel setting it ran under, from its environment.json
    cpu: str | None  # the CPU kind that fingerprint was measured on (results/kernel_fingerprints.json)
    committed_kernels: tuple[str, ...]
    committed_cpu: str | None  # the producer's CPU, from the study's kernel_fingerprint.json
    commits: tuple[tuple[str, bool], ...] = ()  # each invocation's (short commit, uncommitted changes), in order
    resumed: tuple[str, ...] = ()  # runs an invocation resumed from a checkpoint instead of starting
    shards: int = 0  # how many --shard parts the invocations split the runs into (0: not sharded)
    committed: dict | None = None  # the committed answer's mean, t_interval and p, from replication.json

    def rule(self) -> str:
        """The verdict's rule in words, as ``sapo_lab/studies/replicate.py`` declares it."""
        words = VERDICT_RULES.get(self.verdict, "its rule")
        lo, hi = (self.committed or {}).get("t_interval", (-1.0, -1.0))
        if self.verdict == "consistent" and lo <= 0 <= hi:  # the rule accepts either side then
            words += ", any side when the committed interval holds zero, as here"
        return words

    def history(self) -> str:
        """How the replication ran, from its environment.json: the commits its invocations ran from, whether any
        had uncommitted changes, and the runs resumed partway through; empty when one clean commit did it all."""
        parts = []
        distinct = list(dict.fromkeys(self.commits))
        if len({c for c, _ in distinct}) > 1 or any(dirty for _, dirty in distinct):
            who = f"its {_number(self.shards)} shards" if self.shards > 1 else "its invocations"
            named = _joined([c + (" with uncommitted changes" if dirty else "") for c, dirty in distinct])
            several = len({c for c, _ in distinct}) > 1
            parts.append(f"{who} ran from {'different commits' if several else 'one commit'} ({named})")
        if self.resumed:
            runs = _joined(list(self.resumed))
            parts.append(f"{runs} {'was' if len(self.resumed) == 1 else 'were'} resumed from a checkpoint partway "
                         "through")
        return " and ".join(parts)

    def text(self) -> str:
        """``Q1's own runs retrained on other CPU kernels (...) gave −0.099 [...], p = 0.004, consistent ...``."""
        lo, hi = self.comparison["t_interval"]
        gap = f"{self.comparison['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}]".replace("-", "\u2212")
        here = self.kernels + (f", {self.setting} setting" if self.setting else "") + (
            f", {self.cpu}" if self.cpu else "")
        there = ", ".join(self.committed_kernels) + (f", {self.committed_cpu}" if self.committed_cpu else "")
        text = (f"{self.question}'s own runs retrained on other CPU kernels (fingerprint {here}; the study's: "
                f"{there}) gave {gap}, p = {self.comparison['p']:.3f}, {self.verdict} with the committed answer by "
                f"the rule in `sapo_lab/studies/replicate.py` ({self.rule()})")
        history = self.history()
        return text + (f"; {history}" if history else "")


@dataclass(frozen=True)
class Evidence:
    """What the decision is generated from: the rows, the map's cells and its collapse flags."""

    rows: list[Row]
    cells: list[Cell]  # every cell of the gate map on the endpoint (exploratory, one at a time)
    collapse: dict[tuple[float, int], dict[str, tuple[int, int]]]  # (lr, M) at τ 1 -> loss -> (flagged, runs)
    scale: str
    declared: dict[str, str]  # every declared answer of the studies, in order: id -> its interval text
    levels: dict[str, float] = field(default_factory=dict)  # gate-map method -> its seed-mean final Pass@1
    replications: list[Replication] = field(default_factory=list)
    finals: dict[str, dict[int, float]] = field(default_factory=dict)  # gate-map method -> seed -> final Pass@1


def _joined(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _late(row: Row) -> bool:
    """A family member whose side of zero does not survive Holm's adjustment."""
    return row.side != 0 and row.reject is False and bool(row.family)


def _said(row: Row) -> str:
    """``G4b: −0.036 [−0.063, −0.008]``, with the qualifier when the side does not survive Holm's adjustment."""
    late = ", below zero before adjustment, not after" if _late(row) else ""
    return f"{row.id}: {interval_text(row.comparison)}{late}"


def _bare(row: Row) -> str:
    return f"{row.id}: {interval_text(row.comparison)}"


def _ms(values) -> str:
    return "M = " + _joined([str(m) for m in values])


def _count(n: int) -> str:
    return "none" if n == 0 else str(n)


def _number(n: int) -> str:
    words = "zero one two three four five six seven eight nine ten".split()
    return words[n] if 0 <= n < len(words) else str(n)


def _declared_gaps(ev: Evidence) -> list[Row]:
    """The declared SAPO-against-GRPO gaps (the mechanism family compares other pairs of losses)."""
    return [r for r in ev.rows if r.declared and r.kind == "gap" and r.family != "mechanism"]


def _smallest_rate_cells(ev: Evidence) -> list[Cell]:
    smallest = min((c.sapo.learning_rate for c in ev.cells), default=None)
    return [c for c in ev.cells if c.sapo.learning_rate == smallest and c.comparison is not None]


def answer_sentence(ev: Evidence) -> str:
    """The choice in one sentence: the declared comparisons counted by side of zero, where no difference was detected, and
    where the gap appeared. Which method to prefer follows from the counts, never from a mean alone."""
    gaps = _declared_gaps(ev)
    above = [r for r in gaps if r.side > 0]
    below = [r for r in gaps if r.side < 0]
    kept_below = [r for r in below if r.reject]
    if not above and kept_below:
        choice = "so on this evidence prefer GRPO"
    elif above and not below and any(r.reject for r in above):
        choice = "so on this evidence prefer SAPO"
    else:
        choice = "so these studies favour neither method"
    tasks = _joined(sorted({r.task.replace("_", " ") for r in gaps}))
    text = (f"On this toy ({MODEL} learning {tasks}), SAPO finished above GRPO in {_count(len(above))} of the "
            f"{len(gaps)} declared comparisons of the two and below it in {_count(len(below))} "
            f"({_count(len(kept_below))} at the declared level), {choice}")
    tied = [r for r in gaps if r.side == 0]
    ties = [f"showed no detectable difference at {_ms(r.staleness)} with {r.rate_text()} ({_bare(r)})"
            for r in tied]
    small = _smallest_rate_cells(ev)
    zero = sum(side_of_zero(c.comparison) == 0 for c in small)
    if small and 2 * zero > len(small):  # most of the smallest rate's cells hold zero
        ties.append(f"read cell by cell at lr {_rate(small[0].sapo.learning_rate)} (exploratory), had "
                    + _cells_spread(small))
    else:
        small = []
    if ties:
        text += ": the two " + " and, ".join(ties)
        text += _best_tied_level(ev, tied, small)
    paper = [r for r in below if r.study == STUDY and r.tau_pos == 1.0 and r.rate_rule == "shared"]
    trailing = sorted({r.staleness[0] for r in paper})
    if trailing:
        rates = sorted({r.rates[0] for r in paper})
        text += f"; SAPO finished below at {_ms(trailing)} with lr {_joined([_rate(x) for x in rates])} shared"
        kept = sorted({r.staleness[0] for r in paper if r.reject})
        if kept and kept != trailing:
            text += f" (at the declared level at {_ms(kept)} only)"
        slope = next((r for r in ev.rows if r.kind == "slope" and r.declared), None)
        if slope is not None and slope.side < 0:
            text += f", more with each doubling of M ({slope.id})"
    return text + "."


def _widest(cells: list[Cell]) -> Cell:
    return max(cells, key=lambda c: c.comparison.t_interval[1] - c.comparison.t_interval[0])


def _cells_spread(cells: list[Cell]) -> str:
    """``point estimates within ±0.009 (9 of 12 intervals holding zero; the widest, +0.006 [...] at M = 16, τ 1)``:
    the bound is on the means only, so the widest interval is named beside it."""
    zero = sum(side_of_zero(c.comparison) == 0 for c in cells)
    wide = _widest(cells)
    return (f"point estimates within ±{max(abs(c.comparison.mean) for c in cells):.3f} ({zero} of {len(cells)} "
            f"intervals holding zero; the widest, {interval_text(wide.comparison)} at M = {wide.sapo.staleness}, "
            f"τ {wide.sapo.tau_pos:g})")


def _best_tied_level(ev: Evidence, tied: list[Row], small: list[Cell]) -> str:
    """Both methods' highest seed-mean Pass@1 where they tie, and that configuration against the map's best GRPO
    configuration paired by seed: exploratory, the best GRPO one picked after the fact. Empty without levels."""
    grpo = [s for s in {c.grpo.method: c.grpo for c in ev.cells}.values() if s.method in ev.levels]
    candidates = {m: ev.levels[m] for r in tied for m in (r.comparison.method, r.comparison.reference)
                  if r.study == STUDY and m in ev.levels}
    candidates.update({m: ev.levels[m] for c in small for m in (c.sapo.method, c.grpo.method) if m in ev.levels})
    if not candidates or not grpo:
        return ""
    top = max(candidates, key=candidates.get)
    best = max(grpo, key=lambda g: ev.levels[g.method])
    if candidates[top] >= ev.levels[best.method]:
        return ""
    text = f", where both methods' seed-mean Pass@1 stayed at or below {candidates[top]:.3f}"
    a, b = ev.finals.get(top, {}), ev.finals.get(best.method, {})
    seeds = sorted(set(a) & set(b))
    if len(seeds) >= 2:
        cmp = compare({seed: (a[seed], b[seed]) for seed in seeds}, top, best.method)
        where = _setting_words(ev, top)
        text += (f"; the best of those configurations ({where}) against the map's best GRPO configuration, picked "
                 f"after the fact (lr {_rate(best.learning_rate)}, M = {best.staleness}: {ev.levels[best.method]:.3f}), "
                 f"is {interval_text(cmp)} paired by seed (exploratory: {SIDE_WORDS[side_of_zero(cmp)]})")
    return text


def _setting_words(ev: Evidence, method: str) -> str:
    """``SAPO, lr 5e-5, M = 16`` for a gate-map method, from its cell's setting."""
    for c in ev.cells:
        for s in (c.sapo, c.grpo):
            if s.method == method:
                gate = f", τ {s.tau_pos:g}" if s.loss_type == "sapo" and s.tau_pos != 1.0 else ""
                return f"{s.loss_type.upper()}{gate}, lr {_rate(s.learning_rate)}, M = {s.staleness}"
    return method


def _at_staleness(words: str, rows) -> str:
    """``words`` at the rows' staleness values, with each row's gap and interval."""
    return f"{words} at {_ms([r.staleness[0] for r in rows])} ({'; '.join(_bare(r) for r in rows)})"


def _level_groups(kept, late, kept_words: str) -> list[str]:
    """The gaps below zero said by level: those Holm's adjustment kept, then those below zero only before it."""
    groups = [_at_staleness(kept_words, kept)] if kept else []
    if late:
        groups.append(_at_staleness("below zero before Holm's adjustment, not after,", late))
    return groups


def _where_sentence(ev: Evidence, map_rows: list[Row], confirm_rows: list[Row]) -> str:
    """Where SAPO showed no difference and where it trailed, each with its M, gate, rate, id and level."""
    paper = [r for r in map_rows if r.tau_pos == 1.0]
    tied = [r for r in paper if r.side == 0]
    clauses = []
    if tied:
        clauses.append(f"SAPO and GRPO showed no detectable difference at {_ms([r.staleness[0] for r in tied])} "
                       f"with {tied[0].rate_text()} ({'; '.join(_said(r) for r in tied)})")
    at = _smallest_rate_cells(ev)
    if at:
        counts = [sum(side_of_zero(c.comparison) == k for c in at) for k in (1, -1, 0)]
        wide = _widest(at)
        clauses.append(f"at the map's smallest learning rate, {_rate(at[0].sapo.learning_rate)}, every one of its "
                       f"{len(at)} cells ({_ms(sorted({c.sapo.staleness for c in at}))}, every τ) had its point "
                       f"estimate within ±{max(abs(c.comparison.mean) for c in at):.3f} (exploratory: {counts[0]} "
                       f"above zero, {counts[1]} below, {counts[2]} holding zero; the widest interval, "
                       f"{interval_text(wide.comparison)} at M = {wide.sapo.staleness}, τ {wide.sapo.tau_pos:g})")
    below = [r for r in paper if r.side < 0]
    trailed = []
    if below:
        kept = [r for r in below if r.reject]
        late = [r for r in below if _late(r)]
        groups = _level_groups(kept, late, "at the declared level")
        trailed.append(f"at {_ms([r.staleness[0] for r in below])}: " + ", and ".join(groups))
    narrow = [r for r in map_rows if r.tau_pos != 1.0 and r.side < 0]
    if narrow:
        trailed.append(f"with narrower gates at {_ms(sorted({r.staleness[0] for r in narrow}))} ("
                       + "; ".join(f"τ {r.tau_pos:g}, {_said(r)}" + (", at the declared level" if r.reject else "")
                                   for r in narrow) + ")")
    conf = [r for r in confirm_rows if r.side < 0]
    map_steps = {r.steps for r in map_rows}
    if conf:  # a study trained for another number of steps than the map's scale says names its own
        trailed.append("and in the confirmatory studies, each tested alone (" + "; ".join(
            f"{r.task.replace('_', ' ')} at M = {r.staleness[0]}"
            + (f" after {r.steps} rollout steps" if r.steps is not None and r.steps not in map_steps else "")
            + f", {_said(r)}" for r in conf) + ")")
    rates = sorted({r.rates[0] for r in below + narrow + conf})
    if trailed:
        clauses.append(f"with the shared lr {_joined([_rate(x) for x in rates])} SAPO finished below GRPO "
                       + "; ".join(trailed))
    else:
        clauses.append("SAPO trailed GRPO in no declared comparison at a shared learning rate")
    return f"On {ev.scale}: " + "; ".join(clauses) + "."


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


def change_between(base: Row, row: Row) -> PairedComparison:
    """``row``'s gap minus ``base``'s, paired by seed (both rows must cover the same seeds)."""
    a = dict(zip(row.comparison.seeds, row.comparison.differences, strict=True))
    b = dict(zip(base.comparison.seeds, base.comparison.differences, strict=True))
    if set(a) != set(b):
        raise ValueError(f"{row.id} and {base.id} are not on the same seeds: no paired change between them")
    return compare({s: (a[s], b[s]) for s in a}, row.id, base.id, row.alpha)


def _change_words(base: Row, change: PairedComparison) -> str:
    """What the change did to the base gap, from its interval: narrowed or widened it, or holds zero."""
    side = side_of_zero(change)
    if side == 0:
        return "holds zero: no change in the gap is detected"
    toward_zero = (side > 0) == (base.comparison.mean < 0)
    return "the gap narrowed" if toward_zero else "the gap widened"


def _instability(rows: list[Row]) -> list[Row]:
    """Declared rows where the collapse rule flagged at least half of SAPO's runs and fewer of GRPO's."""
    out = []
    for r in rows:
        counts = r.flag_counts()
        if counts and counts[0] * 2 >= counts[2] and counts[1] < counts[0] and r.declared:
            out.append(r)
    return out


def _flag_text(r: Row) -> str:
    s, g, n = r.flag_counts()
    split = r.flag_split()
    text = f"{r.id}: {s} of {n} SAPO runs against {g} of {n} GRPO runs"
    if split:
        text += (f"; seeds with a flagged SAPO run average {split[0]:+.3f}, the others {split[1]:+.3f}"
                 .replace("-", "\u2212"))
    return text


def _tuning_sentence(ev: Evidence, map_rows: list[Row], tuned: list[Row], confirm_rows: list[Row]) -> str:
    """What choosing the learning rate on dev did, at the declared M and at the others, and what went with M = 16's
    gap; every reading beyond the declared answers labelled exploratory."""
    parts = []
    shared = {r.staleness: r for r in map_rows if r.tau_pos == 1.0}
    for r in (r for r in tuned if r.declared):
        base = shared.get(r.staleness)
        if base is None:
            continue
        clause = (f"choosing each method's learning rate on dev at M = {r.staleness[0]} ({r.rate_values()}) "
                  f"gave {interval_text(r.comparison)} ({r.id}, {reading(r)}) against {base.id}'s "
                  f"{interval_text(base.comparison)} at the shared lr {_rate(base.rates[0])}")
        if set(r.comparison.seeds) == set(base.comparison.seeds):
            change = change_between(base, r)
            clause += (f"; the change, {interval_text(change)} paired by seed (exploratory), "
                       f"{_change_words(base, change)}")
        for b in tuned:
            if not b.declared and b.staleness == r.staleness and b.checkpoint != r.checkpoint:
                clause += f"; at the {b.checkpoint} checkpoint {r.id} gives {interval_text(b.comparison)} ({reading(b)})"
        parts.append(clause)
    kept = [r for r in tuned if not r.declared and r.same_runs and r.checkpoint == "final"]
    if kept:
        parts.append(f"at {_ms([r.staleness[0] for r in kept])} dev kept the shared rate for both methods, so the "
                     f"gap there stays {_joined([f'{r.same_runs}' + chr(39) + 's' for r in kept])} "
                     f"({'; '.join(interval_text(r.comparison) for r in kept)}; exploratory)")
    for r in (r for r in tuned if not r.declared and not r.same_runs and r.checkpoint == "final"):
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
                others = [o for o in _instability(confirm_rows) if o.staleness != r.staleness]
                clause += (f" (exploratory, read alone: this suggests most of M = {r.staleness[0]}'s gap goes with "
                           "SAPO's instability at the shared rate"
                           + "".join(f"; {o.id} shows the same pattern, {_flag_text(o).split(': ', 1)[1]}"
                                     for o in others) + ")")
        parts.append(clause)
    for r in (r for r in confirm_rows if r.tuned_gate):
        parts.append(f"tuning each method's own gate on dev instead ({r.rate_text()}, M = {r.staleness[0]}) "
                     f"left {interval_text(r.comparison)} ({r.id}, {reading(r)})")
    if not parts:
        return ""
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


def pooled(rows: list[Row]) -> PairedComparison:
    """The rows' paired differences pooled into one sample (their seed sets must not overlap)."""
    values = {}
    for r in rows:
        for s, d in zip(r.comparison.seeds, r.comparison.differences, strict=True):
            if s in values:
                raise ValueError(f"seed {s} appears in two of {[r.id for r in rows]}: they cannot be pooled")
            values[s] = (d, 0.0)
    return compare(values, "pooled", "0", rows[0].alpha)


def _inside(a: PairedComparison, b: PairedComparison) -> bool:
    return b.t_interval[0] <= a.mean <= b.t_interval[1]


def _repeat_sentence(r: Row, original: Row, family_size: int) -> str:
    """A fresh-seed repeat beside its original: whether it found a similar gap, its level before and after Holm."""
    if _inside(r.comparison, original.comparison) and _inside(original.comparison, r.comparison):
        found = "found a similar gap"
    elif r.side == original.side:
        found = "found a gap on the same side of zero"
    else:
        found = "found a different gap"
    if _late(r):
        level = (f"below zero before Holm's adjustment and not after (raw p = {r.comparison.t_p:.3f}; Holm-adjusted "
                 f"p = {r.p_adjusted:.3f} in its family of {_number(family_size)})")
    else:
        level = reading(r).removeprefix("declared: ") + (
            f" (Holm-adjusted p = {r.p_adjusted:.3f})" if r.p_adjusted is not None else "")
    alone = f", tested alone at α = {original.alpha:g}" if not original.family else ""
    text = (f"{r.id} repeats {original.id}'s configuration on fresh seeds ({r.seeds[0]}–{r.seeds[-1]} for "
            f"{original.seeds[0]}–{original.seeds[-1]}), {_kernels_between(r, original)}, and {found}, {level}: "
            f"{_bare(r)} against {_bare(original)}{alone}")
    if not set(r.comparison.seeds) & set(original.comparison.seeds):
        both = pooled([original, r])
        text += f"; pooled over both seed sets, {interval_text(both)} (exploratory)"
    return text + "."


def _kernels_between(r: Row, original: Row) -> str:
    """Whether a repeat ran on its original's CPU kernels, with both fingerprints (from the studies' files)."""
    if not r.kernels or not original.kernels:
        return "on CPU kernels not recorded for both studies"
    if set(r.kernels) == set(original.kernels):
        return f"on the same CPU kernels (fingerprint {', '.join(r.kernels)})"
    return (f"on other CPU kernels (fingerprint {', '.join(r.kernels)}; {original.id}'s: "
            f"{', '.join(original.kernels)})")


def _replication_sentence(ev: Evidence, mechanism: list[Row]) -> str:
    """Fresh-seed repeats of a declared answer, re-runs on other kernels, and the mechanism family."""
    by_id = {r.id: r for r in ev.rows}
    out = []
    for r in ev.rows:
        original = by_id.get(r.replicates)
        if original is None:
            continue
        size = sum(o.family == r.family for o in ev.rows if o.declared) if r.family else 1
        out.append(_repeat_sentence(r, original, size))
    for rep in ev.replications:
        out.append(rep.text()[0].upper() + rep.text()[1:] + ".")
    if mechanism:
        survivors = [m.id for m in mechanism if m.reject]
        raw = [m.id for m in mechanism if m.side != 0 and not m.reject]
        out.append(f"Why SAPO trails stays open: of the mechanism family that splits Q1 "
                   f"({'; '.join(f'{m.id}: {interval_text(m.comparison)}' for m in mechanism)}), "
                   + ("none reaches the declared level after Holm's adjustment" if not survivors
                      else f"{_joined(survivors)} {'reaches' if len(survivors) == 1 else 'reach'} the declared level")
                   + (f" ({_joined(raw)} below zero before adjustment, not after)" if raw else "") + ".")
    return " ".join(out)


def _untuned_rate(r: Row, rows: list[Row]) -> bool:
    """No row chose a learning rate on dev for this row's task."""
    return not any(o.task == r.task and o.rate_rule == "dev" for o in rows)


def _exploratory_sentence(ev: Evidence, confirm_rows: list[Row]) -> str:
    """The exploratory readings on both sides, each read alone: those that hold zero, those below zero, and
    the collapse flags of the declared answers where SAPO's runs were flagged far more often."""
    readings = [r for r in ev.rows if not r.declared and r.kind == "gap" and not r.same_runs]
    for_sapo = [r for r in readings if r.side >= 0]
    against = [r for r in readings if r.side < 0]
    parts = []
    if for_sapo:
        parts.append("hold zero or lie above it: " + "; ".join(
            f"{r.id}: {interval_text(r.comparison)}" for r in for_sapo))
    if against:
        parts.append("below zero: " + "; ".join(
            f"{r.id}: {interval_text(r.comparison)}" for r in against))
    unstable = [r for r in _instability(confirm_rows)]
    if unstable:
        parts.append("the collapse rule flagged at least half of SAPO's runs and fewer of GRPO's in " + "; in ".join(
            f"{r.task.replace('_', ' ')} at {_ms(r.staleness)} with {r.rate_text()}"
            + (", a rate no study tuned for that task" if _untuned_rate(r, ev.rows) else "")
            + f" ({_flag_text(r)})" for r in unstable))
    if not parts:
        return ""
    return "Exploratory readings, each taken alone without adjustment: " + "; ".join(parts) + "."


def decision_sentences(ev: Evidence) -> str:
    """The plain sentences under the table: where SAPO tied and trailed, how the gap moved with M, what tuning
    did, which declared answers a repeat, a replication or Holm's adjustment qualifies, and the exploratory
    readings on both sides."""
    return "\n".join(f"* {s}" for s in _topics(ev) if s)


def _topics(ev: Evidence) -> list[str]:
    gaps = [r for r in ev.rows if r.kind == "gap"]
    mechanism_ids = _mechanism_ids(ev)
    map_rows = sorted([r for r in gaps if r.declared and r.study == STUDY and r.rate_rule == "shared"
                       and r.checkpoint == "final"], key=lambda r: (r.tau_pos, r.staleness))
    confirm_rows = [r for r in gaps if r.declared and r.study != STUDY and r.id not in mechanism_ids]
    plain_confirm = [r for r in confirm_rows if not r.tuned_gate]
    tuned = [r for r in gaps if r.rate_rule == "dev"]
    slopes = [r for r in ev.rows if r.kind == "slope"]
    mechanism = [r for r in ev.rows if r.id in mechanism_ids]
    # one bullet a topic (where it tied and trailed, the trend, tuning, repeats, exploratory): a reader scans
    return [_where_sentence(ev, map_rows, plain_confirm), _trend_sentence(slopes),
            _tuning_sentence(ev, map_rows, tuned, confirm_rows + map_rows),
            _replication_sentence(ev, mechanism), _exploratory_sentence(ev, confirm_rows + map_rows)]


def _mechanism_ids(ev: Evidence) -> set[str]:
    return {r.id for r in ev.rows if r.family == "mechanism"}


def where_answered(ev: Evidence) -> str:
    """The regimes the declared studies answer for (each study's task, M and shared rate), and where the map
    found no difference: chapter 16's scope for "whether SAPO trains better or worse models"."""
    confirm = [r for r in _declared_gaps(ev) if r.study != STUDY and not r.tuned_gate and r.side != 0]
    answered = _joined([f"M = {r.staleness[0]} on {r.task.replace('_', ' ')} ({r.id})" for r in confirm])
    rates = _joined(sorted({_rate(r.rates[0]) for r in confirm}))
    text = f"At that scale the declared studies answer the question for {answered}, at the shared lr {rates}"
    tied = [r for r in _declared_gaps(ev) if r.study == STUDY and r.side == 0]
    small = _smallest_rate_cells(ev)
    nothing = [f"at {_ms(r.staleness)} with {r.rate_text()} ({_bare(r)})" for r in tied]
    if nothing:
        text += "; the gate map finds no detectable difference " + " or ".join(nothing)
    if small:
        text += (f"{' and,' if nothing else '; the gate map finds,'} at lr {_rate(small[0].sapo.learning_rate)} "
                 f"read cell by cell (each alone), {_cells_spread(small)}")
    return text + "."


def _map_line(ev: Evidence) -> str:
    """The gate map in one line: where SAPO tied and where it finished below GRPO at the paper's temperatures,
    each M with its level, and the declared trend."""
    rows = sorted([r for r in _declared_gaps(ev) if r.study == STUDY and r.rate_rule == "shared" and r.tau_pos == 1.0],
                  key=lambda r: r.staleness)
    tied = [r for r in rows if r.side == 0]
    kept = [r for r in rows if r.side < 0 and r.reject]
    late = [r for r in rows if _late(r)]
    parts = [_at_staleness("no detectable difference", tied)] if tied else []
    parts += _level_groups(kept, late, "SAPO below GRPO at the declared level")
    rates = _joined(sorted({_rate(r.rates[0]) for r in rows}))
    steps = _joined([str(n) for n in sorted({r.steps for r in rows if r.steps})])
    text = (f"The gate map ({len(rows[0].comparison.seeds) if rows else 0} fresh paired seeds, {steps} rollout steps, "
            f"lr {rates} shared): " + "; ".join(parts))
    slope = next((r for r in ev.rows if r.kind == "slope" and r.declared), None)
    if slope is not None:
        verdict = {-1: "grew", 1: "shrank", 0: "did not move detectably"}[slope.side]
        text += f"; the gap {verdict} with M ({slope.id}: {interval_text(slope.comparison)} per doubling)"
    return text + "."


def _tuning_line(ev: Evidence) -> str:
    """What choosing the learning rate on dev did at the declared M, and the exploratory reading at the largest M."""
    shared = {r.staleness: r for r in _declared_gaps(ev) if r.study == STUDY and r.rate_rule == "shared"
              and r.tau_pos == 1.0}
    parts = []
    for r in (r for r in ev.rows if r.declared and r.rate_rule == "dev" and r.kind == "gap"):
        base = shared.get(r.staleness)
        if base is None:
            continue
        text = (f"choosing each method's learning rate on dev at M = {r.staleness[0]} ({r.rate_values()}) gave "
                f"{_bare(r)} against {_bare(base)}")
        if set(r.comparison.seeds) == set(base.comparison.seeds):
            change = change_between(base, r)
            text += f"; the change, {interval_text(change)} paired by seed (exploratory), {_change_words(base, change)}"
        parts.append(text)
    unstable = _instability([r for r in _declared_gaps(ev)])
    if unstable:
        parts.append("the collapse rule flagged at least half of SAPO's runs and fewer of GRPO's in "
                     + " and ".join(f"{r.id} ({_flag_text(r).split(': ', 1)[1]})" for r in unstable)
                     + " (exploratory, read alone)")
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


def _repeat_line(ev: Evidence) -> str:
    """Fresh-seed repeats and replications on other kernels, without the mechanism family."""
    by_id = {r.id: r for r in ev.rows}
    out = []
    for r in ev.rows:
        original = by_id.get(r.replicates)
        if original is not None:
            size = sum(o.family == r.family for o in ev.rows if o.declared) if r.family else 1
            out.append(_repeat_sentence(r, original, size))
    out += [rep.text()[0].upper() + rep.text()[1:] + "." for rep in ev.replications]
    return " ".join(out)


def readme_findings(ev: Evidence | None = None, confirmed: dict | None = None) -> str:
    """The README's findings: a lead-in linking chapter 16, then five lines (the choice, the confirmatory
    headline, the gate map, what tuning did, repeats and replications)."""
    ev = ev if ev is not None else evidence()
    lines = [answer_sentence(ev), headline_sentence(confirmed), _map_line(ev), _tuning_line(ev), _repeat_line(ev)]
    lead = (f"**What the book finds** ([chapter 16]({CHAPTER_16}) has the table with both methods' Pass@1 and what "
            "each number rests on; \"exploratory\" marks a reading taken alone, without adjustment):")
    return "\n".join([lead, *(f"* {line}" for line in lines)])


def unsaid_answers(text: str, declared: dict[str, str]) -> list[str]:
    """The declared answers (``{id: its interval text}``) that no line or sentence of ``text`` states: one that
    names the id as a whole word (``G4`` is not ``G4c``) together with that answer's own interval."""
    pieces = [p for line in text.splitlines() for p in re.split(r"(?<=\.) (?=[A-Z])", line)]
    return [i for i, interval in declared.items()
            if not any(re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", p) and interval in p for p in pieces)]


def decision(ev: Evidence | None = None) -> str:
    """The answer sentence, the table and the sentences, in Markdown; a ``ValueError`` naming any declared
    answer left unsaid."""
    ev = ev if ev is not None else evidence()
    text = (f"**{answer_sentence(ev)}**\n\n" + decision_table([r for r in ev.rows if r.family != "mechanism"])
            + "\n\n" + decision_sentences(ev))
    missing = unsaid_answers(text, ev.declared)
    if missing:
        raise ValueError(f"the decision leaves declared answers unsaid: {', '.join(missing)}")
    return text


# ---------------------------------------------------------------- reading the committed studies


def _identity_without_seed(study: Study, method: str) -> str:
    config = run_identity(study.select(method)[0].config)
    config.pop("seed", None)
    return json.dumps(config, sort_keys=True)


def _runs_by_seed(study: Study, method: str, cell: dict | None) -> dict:
    return {r.seed: r for r in study.select(method, **(cell or {}))}


def _measured(study: Study, cmp: PairedComparison, metric: str, cell: dict | None = None) -> dict:
    """The row's levels (seed-mean ``metric`` of each side over its seeds) and its collapse-flagged seeds."""
    sides = [_runs_by_seed(study, m, cell) for m in (cmp.method, cmp.reference)]
    levels = tuple(statistics.mean(endpoint_value(runs[s], metric) for s in cmp.seeds) for runs in sides)
    flagged = tuple(tuple(s for s in cmp.seeds if (runs[s].record.get("collapse") or {}).get("collapsed"))
                    for runs in sides)
    return {"levels": levels, "flagged": flagged}


def _row_from_runs(entry: dict, study: Study, declared: bool = True, **extra) -> Row:
    """A declared test's row: the regime read from its method's and reference's saved configs."""
    cmp = entry["comparison"]
    m, r = study.select(cmp.method)[0].config, study.select(cmp.reference)[0].config
    plan = study.declaration["analysis"]
    return Row(id=entry["id"], study=study.name, task=m["task"]["name"], tau_pos=m["loss"]["sapo_temperature_pos"],
               staleness=(m["optimization"]["steps_per_generation"],),
               rates=(m["optimization"]["learning_rate"], r["optimization"]["learning_rate"]),
               rate_rule="shared" if m["optimization"]["learning_rate"] == r["optimization"]["learning_rate"]
               and "tuned" != entry.get("kind") else "dev",
               checkpoint="final", comparison=cmp, declared=declared, family=entry.get("family"),
               p_adjusted=entry.get("p_adjusted"), reject=entry.get("reject"),
               seeds=tuple(cmp.seeds), steps=m["optimization"]["max_steps"], alpha=plan["alpha"],
               kernels=study_kernels(study),
               **_measured(study, cmp, plan["endpoint"]["metric"], entry.get("cell")), **extra)


def study_kernels(study: Study) -> tuple[str, ...]:
    """The kernel fingerprints a study's runs were made on: each invocation's in ``environment.json``, and
    ``kernel_fingerprint.json``'s where the study ran before invocations recorded one."""
    folder = study.folder
    known = {inv["kernel_fingerprint"] for inv in folder.read_invocations() if inv.get("kernel_fingerprint")}
    record = folder.read_kernel_record()
    known |= {record.get("kernel_fingerprint")} - {None}
    return tuple(sorted(known - set(record.get("differs_from", []))))


def _compared_on(study: Study, cmp: PairedComparison, metric: str) -> PairedComparison:
    """The same pairs as ``cmp`` compared on another endpoint (the best-dev checkpoint's Pass@1)."""
    sides = [_runs_by_seed(study, m, None) for m in (cmp.method, cmp.reference)]
    values = {s: tuple(endpoint_value(runs[s], metric) for runs in sides) for s in cmp.seeds}
    return compare(values, cmp.method, cmp.reference, study.declaration["analysis"]["alpha"])


def _kernel_cpu(fingerprint: str, root: Path) -> str | None:
    """The CPU kind a kernel fingerprint was measured on, from ``results/kernel_fingerprints.json``."""
    path = root / "kernel_fingerprints.json"
    if not path.is_file():
        return None
    for kind in json.loads(path.read_text())["kinds"]:
        if fingerprint in kind["fingerprints"].values():
            vector = "AVX-512" if kind.get("avx512f") else "AVX2, no AVX-512" if kind.get("avx2") else "no AVX2"
            return f"{kind['model']}, {vector}"
    return None


def replications(root=None) -> list[Replication]:
    """Every committed replication of a declared question (``results/replications/KERNELS/STUDY/``): its answer
    and verdict from ``replication.json``, its kernels from its own ``environment.json``. None committed (or a
    chapter's data fetched without them): an empty list."""
    base = Path(root) if root is not None else results_root()
    out = []
    for record_path in sorted(base.glob("replications/*/*/replication.json")):
        folder = StudyFolder(str(record_path.parent))
        invocations = folder.read_invocations()
        kernels = sorted({inv["kernel_fingerprint"] for inv in invocations if inv.get("kernel_fingerprint")})
        settings = sorted({inv["kernel_setting"] for inv in invocations if inv.get("kernel_setting")})
        if len(kernels) != 1:
            raise ValueError(f"{folder.environment}: the replication's invocations name kernels {kernels}, not one")
        committed = StudyFolder(str(base / record_path.parent.name))
        committed_cpu = committed.read_kernel_record().get("cpu")
        commits = tuple((inv["git_commit"][:7], bool(inv.get("git_dirty"))) for inv in invocations
                        if inv.get("git_commit"))
        resumed = tuple(sorted({run for inv in invocations for run, what in (inv.get("actions") or {}).items()
                                if what == "resumed"}))
        for entry in json.loads(record_path.read_text()).values():
            out.append(Replication(entry["study"], entry["question"], entry["here"], entry["verdict"], kernels[0],
                                   settings[0] if len(settings) == 1 else None, _kernel_cpu(kernels[0], base),
                                   tuple(entry["committed_kernels"]), committed_cpu, commits, resumed,
                                   _shard_count(invocations), entry.get("committed")))
    return out


def _shard_value(argv: list[str]) -> str | None:
    """The ``i/N`` an argument list gives ``--shard``, written ``--shard i/N`` or ``--shard=i/N`` (argparse takes
    both), else None."""
    for i, arg in enumerate(argv):
        if arg == "--shard":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("--shard="):
            return arg.removeprefix("--shard=")
    return None


def _shard_count(invocations: list[dict]) -> int:
    """The N of ``--shard i/N`` when every invocation names one (the runs split across processes), else 0."""
    counts = set()
    for inv in invocations:
        value = _shard_value(list(inv.get("argv") or []))
        if value is None:
            return 0
        counts.add(value.partition("/")[2])
    if len(counts) != 1:
        return 0
    (n,) = counts
    return int(n) if n.isdigit() else 0


def evidence(root=None) -> Evidence:
    """The decision's inputs from the committed studies: the confirmatory answers, the gate map's declared
    answers and its exploratory readings (:mod:`.exploratory`), each with both methods' levels and flags."""
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
    explored = []
    tested = {}
    for a in answers:
        if a.get("kind") == "trend":
            continue
        row = _row_from_runs(a, gate_map)
        key = _identity_without_seed(gate_map, a["comparison"].method) + _identity_without_seed(
            gate_map, a["comparison"].reference)
        rows.append(replace(row, replicates=originals.get(key)))
        tested[(a["comparison"].method, a["comparison"].reference)] = a["id"]
        best = _compared_on(gate_map, a["comparison"], exploratory.BEST_DEV)
        explored.append(replace(row, id=f"{a['id']} at best dev", checkpoint="best dev", comparison=best,
                                declared=False, family=None, p_adjusted=None, reject=None,
                                **_measured(gate_map, best, exploratory.BEST_DEV)))
    for t in exploratory.tuned_by_staleness(gate_map, settings):
        if not t.declared:
            same = tested.get((t.comparison.method, t.comparison.reference))
            explored.append(replace(_tuned_row(t, gate_map, settings, "final"), same_runs=same))
    rows += explored
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
    metric = gate_map.declaration["analysis"]["endpoint"]["metric"]
    finals = {m: {r.seed: endpoint_value(r, metric) for r in gate_map.select(m)} for m in settings}
    levels = {m: statistics.mean(by_seed.values()) for m, by_seed in finals.items() if by_seed}
    return Evidence(rows, cells, collapse, scale, declared, levels, replications(root), finals)


def _shared_rate(answers: list[dict], settings: dict[str, Setting]) -> float:
    """The learning rate of the declared trend's points (the rate every earlier study shared)."""
    trend = next(a for a in answers if a.get("kind") == "trend")
    return settings[trend["points"][0]["method"]].learning_rate


def _tuned_row(t, study: Study, settings: dict[str, Setting], checkpoint: str) -> Row:
    config = study.select(t.picks["sapo"])[0].config
    metric = study.declaration["analysis"]["endpoint"]["metric"] if checkpoint == "final" else "best_dev_eval_pass1"
    return Row(id=f"G3's rule at M = {t.staleness}" if checkpoint == "final" else f"G3 at {checkpoint}",
               study=study.name, task=config["task"]["name"],
               tau_pos=settings[t.picks["sapo"]].tau_pos, staleness=(t.staleness,),
               rates=(t.rates["sapo"], t.rates["grpo"]), rate_rule="dev", checkpoint=checkpoint,
               comparison=t.comparison, declared=False, seeds=tuple(t.comparison.seeds),
               steps=config["optimization"]["max_steps"], alpha=study.declaration["analysis"]["alpha"],
               **_measured(study, t.comparison, metric))


def _slope_row(label: str, slope, study: Study, answer: dict | None = None) -> Row:
    return Row(id=label, study=study.name, task=study.runs[0].config["task"]["name"], tau_pos=slope.tau_pos,
               staleness=slope.staleness, rates=(slope.learning_rate, slope.learning_rate), rate_rule="shared",
               checkpoint="final", comparison=slope.comparison, declared=slope.declared, kind="slope",
               p_adjusted=(answer or {}).get("p_adjusted"), reject=(answer or {}).get("reject"),
               seeds=tuple(slope.comparison.seeds), steps=study.runs[0].config["optimization"]["max_steps"],
               alpha=study.declaration["analysis"]["alpha"])
