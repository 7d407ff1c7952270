"""The gate map's plain answer (README, chapter 15b) against numbers recomputed from the run records with json,
scipy and statsmodels alone: G1's paired interval, G5's per-seed slope interval, and the staleness family's Holm
decisions at M = 2 and M = 16. The expected text is formatted in this test, not by the sentence's code."""

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from sapo_lab.evidence.gate_map import plain_answer

multipletests = pytest.importorskip(
    "statsmodels.stats.multitest", reason="statsmodels (test-only) is not installed"
).multipletests

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "results" / "gate_map" / "runs"


def _declaration() -> dict:
    with open(ROOT / "experiments" / "gate_map.json") as f:
        return json.load(f)


def _final(method: str, seed: int) -> float:
    record = json.loads((RUNS / f"{method}_seed{seed}" / "study_record.json").read_text())
    return 0.0 if record.get("status") == "diverged" else record["final_pass1"]  # a diverged run scores 0


def _gaps(method: str, reference: str, seeds) -> list[float]:
    return [_final(method, s) - _final(reference, s) for s in seeds]


def _t_text(values: list[float], alpha: float) -> str:
    n = len(values)
    mean = sum(values) / n
    half = stats.t.ppf(1 - alpha / 2, n - 1) * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]".replace("-", "\u2212")


# Catches: G1 or G5 quoted from another comparison or computed with a normal quantile or population spread; the
# slope taken over M instead of log2 M; the staleness family's decisions read from raw p instead of Holm's.
def test_the_plain_answer_matches_the_records():
    decl = _declaration()
    alpha, seeds = decl["analysis"]["alpha"], decl["seeds"]
    tests = {t["id"]: t for t in decl["analysis"]["tests"]}
    contrasts = {c["id"]: c for c in decl["analysis"]["contrasts"]}
    text = plain_answer()

    g1 = tests["G1"]
    assert f"(G1: {_t_text(_gaps(g1['method'], g1['reference'], seeds), alpha)})" in text

    points = contrasts["G5"]["points"]
    xs = [p["x"] for p in points]
    x_bar = sum(xs) / len(xs)
    slopes = []
    for seed in seeds:
        gaps = [_final(p["method"], seed) - _final(p["reference"], seed) for p in points]
        g_bar = sum(gaps) / len(gaps)
        slopes.append(sum((x - x_bar) * (g - g_bar) for x, g in zip(xs, gaps, strict=True))
                      / sum((x - x_bar) ** 2 for x in xs))
    assert f"(G5: {_t_text(slopes, alpha)} per doubling of M)" in text

    family = ["G4a", "G4b", "G4c", "G4d"]
    raw = [stats.ttest_rel([_final(tests[q]["method"], s) for s in seeds],
                           [_final(tests[q]["reference"], s) for s in seeds]).pvalue for q in family]
    reject, _, _, _ = multipletests(raw, alpha=alpha, method="holm")
    assert (reject[0], reject[3]) == (False, True), (raw, reject)  # M = 2 and M = 16, as the sentence states
    assert "at M = 2 no difference was detected" in text
    assert "at M = 16 the gap reaches the declared level after Holm's adjustment" in text
