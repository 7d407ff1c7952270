"""The headline's confirmatory intervals recomputed from the run records with json and scipy alone, and written
in the sentence's format by hand: the sentence is checked against numbers its own code did not produce."""

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from sapo_lab.evidence.confirmatory import answer_sentences, headline_sentence

ROOT = Path(__file__).resolve().parents[2]


def _final_pass1_by_seed(study: str, method: str) -> dict[int, float]:
    """Each finished run's final held-out Pass@1, from its study_record.json (a diverged run scores 0, as
    declared)."""
    out = {}
    for record_path in sorted((ROOT / "results" / study / "runs").glob(f"{method}_seed*/study_record.json")):
        record = json.loads(record_path.read_text())
        if record["method"] == method:
            out[record["seed"]] = 0.0 if record.get("status") == "diverged" else record["final_pass1"]
    return out


def _t_interval_text(study: str, method: str, reference: str) -> str:
    a, b = _final_pass1_by_seed(study, method), _final_pass1_by_seed(study, reference)
    with open(ROOT / "experiments" / f"{study}.json") as f:
        declaration = json.load(f)
    seeds = declaration["seeds"]
    assert sorted(a) == sorted(b) == sorted(seeds)
    d = [a[s] - b[s] for s in seeds]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = stats.t.ppf(1 - declaration["analysis"]["alpha"] / 2, n - 1) * sd / math.sqrt(n)
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]".replace("-", "\u2212")


# Catches: the interval computed with a normal quantile, a population standard deviation, or the difference taken
# GRPO - SAPO; a test quoting another test's interval; the sentence's own formatter rounding or signing wrongly
# (interval_text cannot vouch for itself here: the expected text is formatted in this test).
@pytest.mark.parametrize(("study", "qid"), [("confirm_addition", "Q1"), ("confirm_scratchpad", "Q2")])
def test_the_headline_quotes_the_interval_recomputed_from_the_records(study, qid):
    expected = _t_interval_text(study, "sapo", "grpo")
    assert expected in headline_sentence(), (qid, expected)
    assert answer_sentences().count(expected) == 1, (qid, expected)
