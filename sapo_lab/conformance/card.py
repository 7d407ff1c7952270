"""The report card of a conformance audit: one row per property, as objects, JSON and Markdown."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

VERDICTS = ("pass", "differs", "error", "info")


def _json_safe(x):
    """Floats that JSON cannot hold (nan, inf) become the strings 'nan', 'inf', '-inf'."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


@dataclass
class Row:
    """One audited property: what the paper expects, what the loss does, and the verdict.

    ``verdict`` is "pass", "differs", "error" (the loss raised; ``measured`` holds the
    exception's first line) or "info" (both behaviours are valid; never a failure).
    ``values`` holds the measured numbers behind ``measured`` for programs to read.
    """

    property: str
    expected: str
    measured: str
    verdict: str
    detail: str = ""
    values: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass
class ReportCard:
    """Everything an audit measured about one loss function."""

    name: str
    tau_pos: float
    tau_neg: float
    dtype: str
    level: str
    rows: list = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when every required (non-"info") row passes."""
        return all(r.verdict == "pass" for r in self.rows if r.verdict != "info")

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
        return _json_safe(d)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict) -> ReportCard:
        fields = {k: d[k] for k in ("name", "tau_pos", "tau_neg", "dtype", "level")}
        rows = [Row(**r) for r in d.get("rows", [])]
        return cls(**fields, rows=rows, versions=dict(d.get("versions", {})), meta=dict(d.get("meta", {})))

    def to_markdown(self) -> str:
        def cell(s: str) -> str:
            return str(s).replace("|", "\\|").replace("\n", " ")

        required = [r for r in self.rows if r.verdict != "info"]
        ok = sum(r.verdict == "pass" for r in required)
        lines = [
            f"### SAPO conformance: {cell(self.name)}",
            "",
            f"tau_pos = {self.tau_pos:g}, tau_neg = {self.tau_neg:g}, dtype {self.dtype}, expected level: {self.level}. "
            f"**{ok} of {len(required)} required properties pass**"
            + (" (conforms)." if self.passed else "."),
            "",
            "| property | paper | measured | verdict |",
            "|---|---|---|---|",
        ]
        lines += [f"| {cell(r.property)} | {cell(r.expected)} | {cell(r.measured)} | {r.verdict} |" for r in self.rows]
        details = [f"- **{cell(r.property)}**: {cell(r.detail)}" for r in self.rows if r.detail]
        if details:
            lines += ["", *details]
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.to_markdown()

    def _repr_markdown_(self) -> str:
        return self.to_markdown()
