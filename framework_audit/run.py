"""Audit one framework's own SAPO loss inside its environment and write its raw result as JSON.

Usage (from the repository root, with the framework's interpreter):
    framework_audit/.venv-verl/bin/python -m framework_audit.run verl --out results/conformance/raw

Every setting of the adapter is audited with ``sapo_lab.conformance.audit`` in float64 (the verdict) and in
float32 (the dtype log-probs are trained in: NaN, clamps). A framework whose function does not import gets one
line, its import error, and its settings stay listed. The upstream files the adapter was written from are
hashed: a file that changed since the adapter's reading is reported, and the result says so.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import time
import warnings
from pathlib import Path

from framework_audit.adapters import TAU_NEG, TAU_POS
from framework_audit.frameworks import framework

ROOT = Path(__file__).resolve().parent.parent
DTYPES = ("float64", "float32")  # the verdict's dtype first
TORCH_BASE = "framework_audit/.venv-torch"  # build_env.sh's shared torch for layered environments
NOT_MEASURING = ("__init__.py", "cli.py")  # left out of the audit's fingerprint


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def pinned_packages(requirements: Path) -> list[str]:
    """Distribution names pinned with == in a requirements file (comments and options skipped)."""
    names = []
    for line in requirements.read_text().splitlines():
        m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==", line)
        if m:
            names.append(m.group(1))
    return names


def installed_versions(names: list[str]) -> dict:
    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def installed_commit(fw) -> dict:
    """For a framework installed from its repository: the commit its build recorded, and the version its
    distribution declares (EasyR1's is named ``verl``)."""
    if not fw.commit:
        return {}
    stamp = ROOT / fw.venv / ".commit"
    out = {fw.package: stamp.read_text().strip() if stamp.exists() else "not recorded"}
    for dist in importlib.metadata.distributions():
        if (dist.read_text("direct_url.json") or "").find('"url": "file://') >= 0:
            out[dist.metadata["Name"]] = dist.version
    return out


def engine_fingerprint() -> str:
    """A hash of the audit's code (sapo_lab/conformance/*.py but the package's re-exports and the command
    line, which measure nothing), docstrings and comments aside: results from another version of the audit
    are not comparable, so the matrix records which one produced each row."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "sapo_lab" / "conformance").glob("*.py")):
        if path.name in NOT_MEASURING:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        # Python 3.12 adds an empty type_params to every definition: the same code, the same fingerprint
        digest.update(path.name.encode() + b"\0" + ast.dump(tree).replace(", type_params=[]", "").encode())
    return digest.hexdigest()[:12]


def env_build(venv: Path) -> dict:
    """What build_env.sh measured when it built this environment; for one built otherwise (TRL's, by the
    TRL leg, which prints its own build time), its size."""
    path = venv / ".build.json"
    if path.exists():
        return json.loads(path.read_text())
    size = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
    return {"size_mb": round(size / 2**20)}


def audit_settings(adapter, fw, function, import_error: str | None) -> list[dict]:
    from sapo_lab.conformance import AdapterError, audit

    results = []
    for s in adapter.SETTINGS:
        entry = {"setting": s.name, "options": s.options, "note": s.note, "level": s.level,
                 "finding_level": s.finding_level}
        if import_error is not None:
            entry["status"] = "import error"
        elif s.options is None:
            entry["status"] = "no such setting"
        else:
            start = time.perf_counter()
            entry["status"] = "audited"
            for dtype in DTYPES:
                key = "card" if dtype == DTYPES[0] else f"card_{dtype}"
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # frameworks' own deprecation chatter is not a finding
                    try:
                        card = audit(adapter.make_loss(function, s.options), name=f"{fw.label} ({s.name})",
                                     tau_pos=TAU_POS, tau_neg=TAU_NEG, dtype=dtype, level=s.level,
                                     meta={"framework": fw.key, "setting": s.name}, finding_level=s.finding_level)
                    except AdapterError as exc:  # the loss cannot be called on the plainest batch
                        entry["status"], entry["error"] = "cannot be audited", str(exc)
                        break
                entry[key] = card.to_dict()
            entry["audit_seconds"] = round(time.perf_counter() - start, 3)
        results.append(entry)
    return results


def site_file(path: str) -> Path | None:
    """An installed file, by its path inside site-packages (found through its top-level package)."""
    spec = importlib.util.find_spec(path.split("/")[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    candidate = Path(list(spec.submodule_search_locations)[0]).parent / path
    return candidate if candidate.is_file() else None


def sources(adapter) -> list[dict]:
    """The adapter's upstream files as installed: their SHA-256 next to the one the adapter was written from."""
    out = []
    for src in getattr(adapter, "SOURCES", ()):
        found = site_file(src.path)
        digest = hashlib.sha256(found.read_bytes()).hexdigest() if found else "not installed"
        out.append({"path": src.path, "lines": [src.first, src.last], "what": src.what, "sha256": digest,
                    "matches_reading": digest == src.sha256})
    return out


def run(key: str) -> dict:
    fw = framework(key)
    adapter = importlib.import_module(f"framework_audit.adapters.{key}")
    import_error = None
    function = None
    start = time.perf_counter()
    try:
        function = adapter.load()
    except Exception as exc:  # any failure to import is the finding for this framework
        import_error = first_line(exc)
    import_seconds = round(time.perf_counter() - start, 3)
    return {
        "framework": fw.key,
        "package": fw.package,
        "version": fw.version,
        "function": adapter.FUNCTION,
        "import_error": import_error,
        "date": datetime.date.today().isoformat(),
        "engine": engine_fingerprint(),
        "command": f"{Path(sys.executable).relative_to(ROOT) if sys.executable.startswith(str(ROOT)) else 'python'}"
                   f" -m framework_audit.run {key}",
        "versions": {**installed_versions(pinned_packages(ROOT / fw.requirements)), **installed_commit(fw)},
        "environment": {**env_build(ROOT / fw.venv), "import_seconds": import_seconds,
                        **({"torch_base": env_build(ROOT / TORCH_BASE)} if fw.layered else {})},
        "sources": sources(adapter),
        "settings": audit_settings(adapter, fw, function, import_error),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework_audit.run", description=__doc__.splitlines()[0])
    parser.add_argument("framework")
    parser.add_argument("--out", default="results/conformance/raw", help="folder for <framework>.json")
    args = parser.parse_args(argv)
    try:
        result = run(args.framework)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.framework}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)
    audited = sum(s["status"] == "audited" for s in result["settings"])
    note = f"import error: {result['import_error']}" if result["import_error"] else f"{audited} settings audited"
    print(f"{result['package']} {result['version']}: {note} -> {path}")
    changed = [s["path"] for s in result["sources"] if not s["matches_reading"]]
    if changed:  # the findings may still hold, but the adapter's reading of the source is out of date
        print(f"error: upstream source differs from the adapter's reading: {', '.join(changed)}; "
              "re-read it and update the adapter's SOURCES and EXPECTED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
