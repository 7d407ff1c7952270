"""The report card of a conformance audit: the verdict first, one line per difference, then every row."""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import asdict, dataclass, field

from .names import EMPTY_BATCH, EMPTY_RESPONSE, FINDING_LEVELS, SUMMARY_ORDER

VERDICTS = ("pass", "differs", "error", "info")
WIDTH = 100  # every line of the text card fits a 100-column terminal


EMPTY_ONLY_NOTE = ("every other check conforms (gate, temperatures, gradient); in training a batch with an empty "
                   "response would still break the update: divide by each response's token count clamped to >= 1, "
                   "or leave empty responses out of the mean")


def _json_safe(x):
    """Floats that JSON cannot hold (nan, inf) become the strings 'nan', 'inf', '-inf'."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


def wrap(text: str, indent: str = "", first: str | None = None) -> list[str]:
    """``text`` in lines of at most WIDTH columns (long words are broken too)."""
    return textwrap.wrap(text, WIDTH, initial_indent=indent if first is None else first, subsequent_indent=indent,
                         break_long_words=True, break_on_hyphens=False) or [first or indent]


@dataclass
class Row:
    """One audited property: what the paper expects, what the loss does, and the verdict.

    ``verdict`` is "pass", "differs", "error" (the loss raised; ``measured`` holds the
    exception's first line) or "info" (a note: a caller contract or a choice that is valid
    either way; never a difference). ``summary`` is the one line a difference is reported
    in, with its numbers and its likely cause. ``values`` holds the measured numbers behind
    ``measured`` for programs to read.
    """

    property: str
    expected: str
    measured: str
    verdict: str
    detail: str = ""
    values: dict = field(default_factory=dict)
    summary: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    def line(self) -> str:
        """The row in one sentence: its summary, or its property and measurement."""
        return self.summary or f"{self.property}: {self.measured}"


@dataclass
class ReportCard:
    """Everything an audit measured about one loss function.

    ``finding_level`` says what the findings describe: "function" (the loss as called with
    the audit's arguments) or "training" (as the framework's trainer calls it). ``lead`` names the
    row that makes every other cause unreliable (then the other differences are told by their
    measurements alone), '' when none. ``precisions`` holds, for each training precision audited
    beside ``dtype``, where its verdicts disagree with these rows ({} when only ``dtype`` was
    audited); a check that differs only there is a difference of the card.
    """

    name: str
    tau_pos: float
    tau_neg: float
    dtype: str
    level: str
    rows: list = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    finding_level: str = "function"
    lead: str = ""
    precisions: dict = field(default_factory=dict)

    @property
    def checks(self) -> list:
        """The rows that are checks (a note is not)."""
        return [r for r in self.rows if r.verdict != "info"]

    @property
    def passed(self) -> bool:
        """True when every check passes (notes aside), at every precision audited."""
        return all(r.verdict == "pass" for r in self.checks) and not self.precision_differences()

    def differences(self) -> list:
        """The checks that differ or raised, the leading finding first, then causes before consequences."""
        rank = {p: i for i, p in enumerate(SUMMARY_ORDER)}
        rank[self.lead] = -1
        return sorted((r for r in self.checks if r.verdict != "pass"), key=lambda r: rank.get(r.property, 99))

    def precision_differences(self) -> list:
        """(dtype, property, line) of each check that differs only at a training precision."""
        return [(dtype, prop, line) for dtype, p in self.precisions.items()
                for prop, line in p.get("differs_only_here", {}).items()]

    def precision_lines(self) -> list:
        """One sentence per training precision audited beside the card's own: what it adds or where it agrees."""
        out = []
        for dtype, p in self.precisions.items():
            if not p.get("audited"):
                out.append(f"{dtype}: not audited: {p.get('reason', '')}")
                continue
            said = []
            if p.get("differs_only_here"):
                said.append(f"differs where {self.dtype} conforms: {', '.join(p['differs_only_here'])}")
            if p.get("passes_only_here"):
                said.append(f"conforms where {self.dtype} differs: {', '.join(p['passes_only_here'])}")
            text = "; ".join(said) or f"agrees with {self.dtype}"
            above, limit = p.get("overflow_above"), p.get("exp_range")
            if above is not None and (limit is None or abs(above - limit) < 0.05):
                text += (f"; exp(log r) overflows it above log r = {above:+.2f} (NaN there, as in any "
                         "loss that does not clamp log r; not counted)")
            elif above is not None:
                text += (f"; NaN above log r = {above:+.2f}, past its exp range (log r > {limit:.2f}), as in any loss "
                         "that does not clamp log r; not counted")
            out.append(f"{dtype}: {text}")
        return out

    def notes(self) -> list:
        """Rows that conform but carry a remark (a caller contract, a credited clamp, tau held in float32)."""
        return [r for r in self.rows if r.verdict in ("info", "pass") and r.summary]

    def verdict_line(self) -> str:
        """``CONFORMS`` or ``DIFFERS in N of M checks``, with the dtype and the level."""
        n = len(self.checks)
        where = f"{self.dtype}, {self.level} level"
        if self.passed:
            return f"CONFORMS: all {n} checks match the paper ({where})"
        extra = {prop for _, prop, _ in self.precision_differences()}
        count = len(self.differences()) + len(extra)
        if extra:
            where += f"; {len(extra)} of them only in {', '.join(sorted({d for d, _, _ in self.precision_differences()}))}"
        if self.only_empty_differ():  # the gate is right: the first line says so
            return f"DIFFERS in {count} of {n} checks ({where}): only where responses are empty"
        return f"DIFFERS in {count} of {n} checks ({where})"

    def only_empty_differ(self) -> bool:
        """True when the only differences are a response, or a whole batch, without tokens."""
        differing = {r.property for r in self.differences()} | {p for _, p, _ in self.precision_differences()}
        return bool(differing) and differing <= {EMPTY_RESPONSE, EMPTY_BATCH}

    def row(self, prop: str) -> Row:
        """The row of one property (the names are the constants of :mod:`sapo_lab.conformance`)."""
        for r in self.rows:
            if r.property == prop:
                return r
        raise KeyError(f"no row {prop!r}; rows: {[r.property for r in self.rows]}")

    def verdicts(self) -> dict:
        return {r.property: r.verdict for r in self.rows}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        d["verdict"] = self.verdict_line()
        return _json_safe(d)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict) -> ReportCard:
        fields = {k: d[k] for k in ("name", "tau_pos", "tau_neg", "dtype", "level")}
        rows = [Row(**r) for r in d.get("rows", [])]
        return cls(**fields, rows=rows, versions=dict(d.get("versions", {})), meta=dict(d.get("meta", {})),
                   lead=d.get("lead", ""), precisions=dict(d.get("precisions", {})),
                   finding_level=d.get("finding_level", "function"))

    def to_text(self, details: bool = False, notes: tuple = ()) -> str:
        """The card for a terminal: the verdict, the precision it was measured at when the loss's own is narrower,
        one line per difference, the notes (the card's, then ``notes``), the level; every row with ``details``.
        No line is wider than WIDTH."""
        lines = [self.verdict_line()]
        for key in ("loss_output", "precision", "changes_inputs"):  # right under the verdict: how it was measured
            if self.meta.get(key):
                lines += wrap(self.meta[key], "    ", "  note: ")
        for r in self.differences():
            lines += wrap(r.line(), "    ", "  - ")
        for dtype, _, line in self.precision_differences():
            lines += wrap(f"in {dtype} only: {line}", "    ", "  - ")
        if self.only_empty_differ():
            lines += wrap(EMPTY_ONLY_NOTE, "    ", "  note: ")
        for note in [r.summary for r in self.notes()] + list(notes):
            lines += wrap(note, "    ", "  note: ")
        for line in self.precision_lines():
            lines += wrap(line, "    ", "  ")
        lines += wrap(f"Level: {FINDING_LEVELS[self.finding_level]}; tau_pos = {self.tau_pos:g}, "
                      f"tau_neg = {self.tau_neg:g}.")
        if self.meta.get("allowance"):
            lines += wrap(self.meta["allowance"][0].upper() + self.meta["allowance"][1:] + ".")
        if details:
            for r in self.rows:
                lines += ["", *wrap(f"{r.property}: {r.measured}", "    ", f"[{r.verdict}] ")]
                lines += wrap(f"paper: {r.expected}", "    ", "    ")
                if r.detail:
                    lines += wrap(r.detail, "    ", "    ")
        else:
            lines.append("--details shows every check; --json writes the card as JSON.")
        return "\n".join(lines) + "\n"

    def to_markdown(self) -> str:
        def cell(s: str) -> str:
            return str(s).replace("|", "\\|").replace("\n", " ")

        lines = [f"### SAPO conformance: {cell(self.name)}", "", f"**{self.verdict_line()}**", ""]
        lines += [f"- note: {cell(self.meta[k])}" for k in ("loss_output", "precision", "changes_inputs")
                  if self.meta.get(k)]
        lines += [f"- {cell(r.line())}" for r in self.differences()]
        lines += [f"- in {dtype} only: {cell(line)}" for dtype, _, line in self.precision_differences()]
        lines += [f"- note: {cell(r.summary)}" for r in self.notes()]
        lines += [f"- {cell(line)}" for line in self.precision_lines()]
        lines += ["", f"tau_pos = {self.tau_pos:g}, tau_neg = {self.tau_neg:g}; findings: "
                  f"{FINDING_LEVELS[self.finding_level]}."
                  + (f" {cell(self.meta['allowance'])}." if self.meta.get("allowance") else ""), "",
                  "| property | paper | measured | verdict |", "|---|---|---|---|"]
        lines += [f"| {cell(r.property)} | {cell(r.expected)} | {cell(r.measured)} | {r.verdict} |" for r in self.rows]
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.to_text()

    def _repr_markdown_(self) -> str:
        return self.to_markdown()
