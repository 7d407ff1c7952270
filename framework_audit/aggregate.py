"""Collect the frameworks' raw audit results into results/conformance/matrix.json and matrix.md.

    python -m framework_audit.aggregate                      # raw results from results/conformance/raw
    python -m framework_audit.aggregate --raw DIR --check     # DIR's results replace the committed ones; exit 1
                                                          # if the matrix differs from the committed file

The matrix lists every framework of framework_audit/frameworks.py, in that order; one whose raw result is
missing is listed as "not run". ``--check`` ignores what changes from run to run without changing a
finding: dates, timings, environment sizes and digits below the audit's resolution.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from pathlib import Path

from framework_audit.frameworks import FRAMEWORKS
from framework_audit.matrix_md import render

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results" / "conformance"
COMMAND = "make conformance"
VOLATILE_KEYS = {"date", "generated", "audit_seconds", "environment"}


def load_raw(dirs: list[Path]) -> dict:
    """key -> raw result; a later folder's file replaces an earlier one's."""
    raw = {}
    for d in dirs:
        for path in sorted(d.glob("*.json")):
            raw[path.stem] = json.loads(path.read_text())
    return raw


def build(raw: dict, generated: str) -> dict:
    frameworks = []
    for fw in FRAMEWORKS:
        if fw.key in raw:
            frameworks.append(raw[fw.key])
        else:
            frameworks.append({"framework": fw.key, "package": fw.package, "version": fw.version,
                               "import_error": None, "status": "not run", "settings": []})
    return {
        "title": "SAPO conformance of the frameworks' own installed code",
        "generated": generated,
        "command": COMMAND,
        "frameworks": frameworks,
    }


def _number(x: float) -> float:
    if not math.isfinite(x) or abs(x) < 1e-6:  # below the float64 audit's tolerances: rounding noise
        return 0.0 if math.isfinite(x) else x
    return float(f"{x:.4g}")


# A number inside text, never a part of a dotted version ("ray 2.60.0" stays as it is).
_TINY = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?e-(?:0*[7-9]|\d{2,})(?!\.?\d)")
_FLOAT = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?:e[-+]?\d+)?(?!\.?\d)")


def _text(s: str) -> str:
    s = _TINY.sub("0", s)
    return _FLOAT.sub(lambda m: f"{float(m.group()):.4g}", s)


def comparable(obj):
    """The matrix without run-to-run noise (see the module docstring)."""
    if isinstance(obj, dict):
        return {k: comparable(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [comparable(v) for v in obj]
    if isinstance(obj, float):
        return _number(obj)
    if isinstance(obj, str):
        return _text(obj)
    return obj


def differences(new, old, path="matrix") -> list[str]:
    """Paths where two comparable matrices differ (the first few are enough to find the cause)."""
    if isinstance(new, dict) and isinstance(old, dict):
        out = []
        for k in sorted(set(new) | set(old), key=str):
            if k not in new or k not in old:
                out.append(f"{path}.{k}: {'added' if k in new else 'removed'}")
            else:
                out += differences(new[k], old[k], f"{path}.{k}")
        return out
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [d for i, (a, b) in enumerate(zip(new, old, strict=True)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if new == old else [f"{path}: {json.dumps(old)[:160]} -> {json.dumps(new)[:160]}"]


def write(matrix: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix.json").write_text(json.dumps(matrix, indent=1, allow_nan=False) + "\n")
    (out / "matrix.md").write_text(render(matrix))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework_audit.aggregate", description=__doc__.splitlines()[0])
    parser.add_argument("--raw", action="append", default=[], help="a folder of fresh <framework>.json (repeatable)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--check", action="store_true", help="compare with the committed matrix instead of writing")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()  # a relative --out is relative to the working directory
    matrix = build(load_raw([RESULTS / "raw", *map(Path, args.raw)]), datetime.date.today().isoformat())
    if not args.check:
        write(matrix, out)
        print(f"wrote {out / 'matrix.json'} and {out / 'matrix.md'}")
        return 0
    committed_path = out / "matrix.json"
    if not committed_path.exists():
        print(f"error: no committed matrix at {committed_path}", file=sys.stderr)
        return 2
    diff = differences(comparable(matrix), comparable(json.loads(committed_path.read_text())))
    if diff:
        shown = committed_path.relative_to(ROOT) if committed_path.is_relative_to(ROOT) else committed_path
        print(f"the audit changed the matrix ({len(diff)} differences); rerun `make conformance` and commit "
              f"{shown}:", file=sys.stderr)
        for line in diff[:20]:
            print(f"  {line}", file=sys.stderr)
        return 1
    print("conformance matrix unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
