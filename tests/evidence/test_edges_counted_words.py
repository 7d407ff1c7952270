"""Sentences whose wording depends on a count: each tried on both sides of its boundary with planted inputs."""

from _planted_gaps import BELOW, NEAR, SEEDS
from _planted_gaps import cell as _cell
from _planted_gaps import comparison as _comparison

from sapo_lab.evidence import decision
from sapo_lab.evidence.confirmatory import MechanismReading
from sapo_lab.evidence.decision import Evidence, Row


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
