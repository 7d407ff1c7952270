"""The committed conformance matrix (results/conformance/) is complete, consistent, and held to the source reading.

Runs in the main environment, without any framework: the matrix was produced inside each framework's own
environment (`make conformance`); CI reruns the frameworks that fit its budget (tools/ci_conformance.sh). For
every framework, each adapter states which checks a reading of the upstream lines says differ (``EXPECTED``),
pinned to those lines and the installed file's SHA-256 (``SOURCES``): a wrong finding in the matrix, even one
written consistently everywhere, fails test_findings_match_the_source_reading.
"""

import copy
import datetime
import importlib
import json
import re
from pathlib import Path

import pytest

from framework_audit import aggregate
from framework_audit.aggregate import RESULTS, build, comparable, differences, load_raw
from framework_audit.frameworks import FRAMEWORKS
from framework_audit.matrix_md import differing, render
from framework_audit.run import engine_fingerprint, pinned_packages

ROOT = Path(__file__).resolve().parents[2]
MATRIX = json.loads((RESULTS / "matrix.json").read_text())
VERDICTS = {"pass", "differs", "error", "info"}


def _pins(path: str) -> dict:
    text = (ROOT / path).read_text()
    return {m.group(1): m.group(2) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", text, re.M)}


def test_every_framework_is_listed_in_order():
    """A framework dropped from the matrix, or listed under another version, fails here."""
    assert [(f["framework"], f["package"], f["version"]) for f in MATRIX["frameworks"]] == \
        [(f.key, f.package, f.version) for f in FRAMEWORKS]


@pytest.mark.parametrize("fw", FRAMEWORKS, ids=lambda f: f.key)
def test_every_setting_is_audited_or_says_why_not(fw):
    """A framework never run, a setting without a card, or an import error without its message fails here."""
    entry = next(f for f in MATRIX["frameworks"] if f["framework"] == fw.key)
    assert entry.get("status") != "not run", f"{fw.key}: no raw result; run `make conformance`"
    names = [s["setting"] for s in entry["settings"]]
    assert {"defaults", "paper"} <= set(names), names
    for s in entry["settings"]:
        if entry["import_error"]:
            assert s["status"] == "import error" and "card" not in s
            assert entry["import_error"].strip() and "\n" not in entry["import_error"]
        elif s["options"] is None:
            assert s["status"] == "no such setting" and s["note"], s
        else:
            assert s["status"] == "audited", s
            for key, dtype in (("card", "float64"), ("card_float32", "float32")):
                card = s[key]
                assert card["level"] == s["level"] and card["dtype"] == dtype
                assert card["finding_level"] == s["finding_level"]
                assert card["rows"] and all(r["verdict"] in VERDICTS and r["measured"] for r in card["rows"])
    datetime.date.fromisoformat(entry["date"])  # says when it was last run


@pytest.mark.parametrize("fw", FRAMEWORKS, ids=lambda f: f.key)
def test_settings_match_the_adapter(fw):
    """An adapter whose settings changed after the matrix was written (a stale matrix) fails here."""
    adapter = importlib.import_module(f"framework_audit.adapters.{fw.key}")  # imports no framework
    entry = next(f for f in MATRIX["frameworks"] if f["framework"] == fw.key)
    assert [(s["setting"], s["options"], s["level"], s["finding_level"]) for s in entry["settings"]] == \
        [(s.name, s.options, s.level, s.finding_level) for s in adapter.SETTINGS]
    assert entry["function"] == adapter.FUNCTION


def mismatches(matrix: dict) -> list[str]:
    """Where the matrix's findings differ from the adapters' reading of the upstream source (EXPECTED)."""
    out = []
    for fw in matrix["frameworks"]:
        adapter = importlib.import_module(f"framework_audit.adapters.{fw['framework']}")
        for s in fw["settings"]:
            if s["options"] is None:
                continue
            for key, expected in (("card", adapter.EXPECTED), ("card_float32", adapter.EXPECTED_FLOAT32)):
                got, want = sorted(differing(s[key])), sorted(expected[s["setting"]])
                if got != want:
                    out.append(f"{fw['framework']} {s['setting']} {key}: differs in {got}, source says {want}")
    return out


def test_findings_match_the_source_reading():
    """Every committed finding equals what a reading of the framework's source lines says (adapter.EXPECTED)."""
    assert mismatches(MATRIX) == []


def _plant(matrix: dict, framework: str, prop: str, verdict: str) -> dict:
    """A copy of the matrix with one row's verdict changed in every card of one framework, consistently."""
    planted = copy.deepcopy(matrix)
    for fw in planted["frameworks"]:
        if fw["framework"] == framework:
            for s in fw["settings"]:
                for key in ("card", "card_float32"):
                    for r in (s.get(key) or {}).get("rows", []):
                        if r["property"] == prop:
                            r["verdict"] = verdict
    return planted


@pytest.mark.parametrize("framework,prop,verdict", [
    ("ms_swift3", "on-policy gradient (r = 1)", "pass"),  # the missing 4/tau hidden
    ("trl", "aggregation", "differs"),  # a difference TRL does not have
    ("verl", "extreme log-ratios", "differs"),  # verl's harmless clamp called a difference
    ("easyr1", "aggregation", "pass"),  # EasyR1's token pool hidden
    ("axolotl", "on-policy gradient (r = 1)", "differs"),  # Axolotl's copy of TRL's 4/tau denied
    ("skyrl", "aggregation", "pass"),  # skyrl 0.4.0's default token pool hidden
])
def test_a_planted_wrong_finding_fails(framework, prop, verdict):
    assert mismatches(_plant(MATRIX, framework, prop, verdict))


@pytest.mark.parametrize("fw", FRAMEWORKS, ids=lambda f: f.key)
def test_sources_are_the_adapters_reading(fw):
    """The matrix was measured on the very files the adapter was written from (same lines, same SHA-256)."""
    adapter = importlib.import_module(f"framework_audit.adapters.{fw.key}")
    entry = next(f for f in MATRIX["frameworks"] if f["framework"] == fw.key)
    assert [(s["path"], s["lines"], s["sha256"]) for s in entry["sources"]] == \
        [(s.path, [s.first, s.last], s.sha256) for s in adapter.SOURCES]
    assert adapter.SOURCES and all(s["matches_reading"] for s in entry["sources"])


def test_check_takes_a_relative_out_and_keeps_versions(monkeypatch, capsys):
    """`aggregate --check --out results/conformance` from the repository root compares, and a version such as
    ray 2.60.0 is compared as written (not as the number 2.6)."""
    monkeypatch.chdir(ROOT)
    assert aggregate.main(["--check", "--out", "results/conformance"]) == 0, capsys.readouterr().err
    versions = comparable({"versions": {"ray": "2.60.0", "torch": "2.13.0+cpu"}, "text": "error 0.19100"})
    assert versions == {"versions": {"ray": "2.60.0", "torch": "2.13.0+cpu"}, "text": "error 0.191"}
    assert differences(comparable({"v": "2.60.0"}), comparable({"v": "2.6.0"}))


INSTALLED_AS = {"easyr1": ("verl",)}  # a framework installed from its repository, under its import name


@pytest.mark.parametrize("fw", FRAMEWORKS, ids=lambda f: f.key)
def test_versions_match_the_requirements_file(fw):
    """A requirements file bumped without rerunning the audit (or an environment that installed
    something else than its pins) fails here."""
    pins = _pins(fw.requirements)
    entry = next(f for f in MATRIX["frameworks"] if f["framework"] == fw.key)
    recorded = {k: v for k, v in entry["versions"].items() if k != "python"}
    if fw.commit:  # installed from its repository: the commit its build recorded is the pinned one
        assert fw.commit.startswith(fw.version) and recorded.pop(fw.package) == fw.commit, recorded
        # its own distribution may carry another import name (EasyR1 installs as `verl`); anything else
        # unpinned came in despite --no-deps and fails below
        recorded = {k: v for k, v in recorded.items() if k in pins or k not in INSTALLED_AS.get(fw.key, ())}
    else:
        assert pins.get(fw.package) == fw.version, (fw.requirements, fw.package, pins.get(fw.package))
    assert set(recorded) == set(pinned_packages(ROOT / fw.requirements))
    for name, version in recorded.items():
        assert version.split("+")[0] == pins[name].split("+")[0], (fw.key, name, version, pins[name])


def test_every_row_comes_from_the_current_audit():
    """A change to sapo_lab/conformance without rerunning `make conformance` (rows measured by an older
    audit, or by two different ones) fails here."""
    engines = {f["framework"]: f.get("engine") for f in MATRIX["frameworks"]}
    assert set(engines.values()) == {engine_fingerprint()}, (
        f"audit source is {engine_fingerprint()}, the matrix has {engines}: rerun `make conformance`")


def test_markdown_is_the_json_rendered():
    """A hand-edited or stale matrix.md fails here."""
    assert (RESULTS / "matrix.md").read_text() == render(MATRIX)


def test_json_is_the_raw_results_aggregated():
    """A raw result updated without regenerating matrix.json (or the reverse) fails here."""
    rebuilt = build(load_raw([RESULTS / "raw"]), MATRIX["generated"])
    assert rebuilt == MATRIX


def test_check_ignores_timings_but_not_findings():
    """The CI comparison must not fail on a slower machine, and must fail when a verdict or number changes."""
    audited = next(s for f in MATRIX["frameworks"] for s in f["settings"] if s.get("card"))
    slower = copy.deepcopy(MATRIX)
    for f in slower["frameworks"]:
        f["date"], f["environment"] = "2000-01-01", {"build_seconds": 1e6, "size_mb": 1}
    slower["generated"] = "2000-01-01"
    assert differences(comparable(slower), comparable(MATRIX)) == []
    changed = copy.deepcopy(MATRIX)
    row = next(s for f in changed["frameworks"] for s in f["settings"] if s.get("card"))["card"]["rows"][0]
    row["verdict"] = "differs" if row["verdict"] != "differs" else "pass"
    assert differences(comparable(changed), comparable(MATRIX))
    assert audited  # there is at least one card to change
