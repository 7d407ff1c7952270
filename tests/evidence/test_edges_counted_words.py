"""Sentences whose wording depends on a count: each tried on both sides of its boundary with planted inputs."""
import functools

from sapo_lab.evidence import decision
from sapo_lab.evidence.confirmatory import MechanismReading
from sapo_lab.evidence.decision import Evidence, Row
from sapo_lab.evidence.gate_map import Cell, Setting
from sapo_lab.evidence.paired import compare

SEEDS = tuple(range(40, 50))
BELOW = [-0.1 + 0.01 * i for i in range(10)]  # every seed below zero: the t interval excludes zero
NEAR = [0.004 if i % 2 else -0.002 for i in range(10)]  # mean +0.001, the interval holds zero


def _comparison(gaps):
    return _comparison_of(tuple(gaps))


@functools.cache  # each comparison runs a 20,000-resample bootstrap; the planted lists repeat
def _comparison_of(gaps):
    return compare({s: (0.5 + g, 0.5) for s, g in zip(SEEDS, gaps, strict=True)}, "sapo", "grpo")


def _cell(lr, m, gaps):
    sapo = Setting(f"sapo_{lr}_{m}", "sapo", 1.0, 1.05, lr, m)
    grpo = Setting(f"grpo_{lr}_{m}", "grpo", 1.0, 1.05, lr, m)
    return Cell(sapo, grpo, 10, 10, False, _comparison(gaps))


def _evidence(small_rate_gaps):
    """One declared gap row and four cells at the smallest rate with the given gap lists."""
    cmp = _comparison(NEAR)
    row = Row(id="G4a", study="gate_map", task="addition", tau_pos=1.0, staleness=(2,), rates=(2e-4, 2e-4),
              rate_rule="shared", checkpoint="final", comparison=cmp, declared=True, family=None,
              p_adjusted=cmp.t_p, reject=False, seeds=SEEDS)
    cells = [_cell(5e-5, m, g) for m, g in zip((2, 4, 8, 16), small_rate_gaps, strict=True)]
    cells += [_cell(2e-4, m, BELOW) for m in (2, 4, 8, 16)]
    return Evidence([row], cells, {}, "a planted toy", {})


def test_the_cell_by_cell_tie_needs_more_than_half_of_the_smallest_rates_cells():
    """Catches `>=` for `>` in "most of the smallest rate's cells hold zero": two of four is half, not most."""
    half = decision.answer_sentence(_evidence([NEAR, NEAR, BELOW, BELOW]))
    most = decision.answer_sentence(_evidence([NEAR, NEAR, NEAR, BELOW]))
    assert "read cell by cell" not in half
    assert "read cell by cell at lr 5e-5 (exploratory)" in most


def _mechanism(survivors):
    results = {}
    for i, gaps in zip(("Q3a", "Q3b", "Q3c"), (BELOW, BELOW, NEAR), strict=True):
        cmp = _comparison(gaps)
        results[i] = {"comparison": cmp, "p": cmp.t_p, "p_adjusted": cmp.t_p}
    reading = MechanismReading(identity_error=0.0, share_suppression=0.4, share_smoothness=0.6,
                               survivors=survivors, raw_below_alpha=survivors, kernel_interval=(-0.01, 0.01))
    return reading.sentence(results)


def test_the_mechanism_sentence_agrees_its_verb_with_the_number_of_survivors():
    """Catches the singular "reaches" kept for two survivors (a `<= 2` for `< 2`) and the plural used for one."""
    assert "none reaches the declared level" in _mechanism([])
    assert "Q3b reaches the declared level" in _mechanism(["Q3b"])
    assert "Q3a, Q3b reach the declared level" in _mechanism(["Q3a", "Q3b"])
