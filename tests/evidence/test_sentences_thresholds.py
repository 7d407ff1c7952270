"""The generated sentences read on planted analysis objects, on both sides of every threshold they decide by.

Each comparison here is built by hand (a mean, a t interval, per-seed differences), so what a sentence must say
follows from the planted numbers alone: the expected words and intervals are written out, not produced by the
generators under test.
"""

from types import SimpleNamespace

import pytest

from sapo_lab.evidence import confirmatory as narrative
from sapo_lab.evidence.gate_map import Cell, Setting, _level_text, side_of_zero, where_the_gate_stands
from sapo_lab.evidence.paired import PairedComparison

MINUS = "\u2212"


def _cmp(mean, lo, hi, differences=None, method="sapo", reference="grpo"):
    differences = differences if differences is not None else [mean] * 10
    seeds = list(range(len(differences)))
    return PairedComparison(method, reference, seeds, differences, mean, 0.01, (lo, hi), (lo, hi), 0.01, 0.01, 0.01,
                            sum(d < 0 for d in differences), sum(d > 0 for d in differences),
                            sum(d == 0 for d in differences))


def _headline_results(q2_interval):
    # the planted intervals sit on the committed studies' runs, which give the sentence its M and learning rate
    return {"Q1": {"comparison": _cmp(-0.075, -0.124, -0.026), "study": "confirm_addition"},
            "Q2": {"comparison": _cmp(-0.05, *q2_interval), "study": "confirm_scratchpad"},
            "Q4": {"comparison": _cmp(-0.089, -0.127, -0.050), "study": "confirm_addition"}}


def test_the_headline_quotes_intervals_wholly_below_zero():
    text = narrative.headline_sentence(_headline_results((-0.09, -0.01)))
    assert "SAPO finished below GRPO" in text and "10 paired seeds" in text
    for quoted in (f"{MINUS}0.075 [{MINUS}0.124, {MINUS}0.026]", f"{MINUS}0.050 [{MINUS}0.090, {MINUS}0.010]",
                   f"{MINUS}0.089 [{MINUS}0.127, {MINUS}0.050]"):
        assert quoted in text


@pytest.mark.parametrize("upper", [0.0, 0.01])
def test_the_headline_refuses_an_interval_that_reaches_zero_though_its_mean_is_below(upper):
    # catches the headline guarded by the means: a mean of -0.05 with an interval up to zero or above is no
    # evidence that SAPO finished below; "below" must not be said
    with pytest.raises(ValueError, match="reaches zero"):
        narrative.headline_sentence(_headline_results((-0.11, upper)))


def _mechanism(monkeypatch, kernel, rejects=(False, True, False), raw_p=(0.03, 0.004, 0.6)):
    q1 = [-0.1, -0.2, 0.0, -0.1]
    q3a = [-0.03, -0.06, 0.02, -0.05]
    q3b = [a - b for a, b in zip(q1, q3a, strict=True)]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    results = {"Q1": {"id": "Q1", "comparison": _cmp(mean(q1), -0.2, -0.01, q1), "study": "planted", "p": 0.01}}
    for qid, diffs, interval, reject, p in zip(("Q3a", "Q3b", "Q3c"), (q3a, q3b, [0.0] * 4),
                                                 ((-0.09, 0.03), (-0.13, -0.01), kernel), rejects, raw_p, strict=True):
        results[qid] = {"comparison": _cmp(mean(diffs) if qid != "Q3c" else sum(kernel) / 2, *interval, diffs),
                        "id": qid, "p": p, "p_adjusted": min(1.0, 3 * p), "reject": reject, "family": "mechanism"}
    study = SimpleNamespace(declaration={"analysis": {"alpha": 0.05}})
    monkeypatch.setattr(narrative, "load_study", lambda name, root=None: study)
    return results, narrative.mechanism_reading(results)


@pytest.mark.parametrize(("kernel", "word"), [((-0.08, -0.01), "excludes"), ((-0.05, 0.04), "holds"),
                                              ((0.01, 0.06), "excludes"), ((-0.04, 0.0), "holds"),
                                              ((0.0, 0.03), "holds")])
def test_the_kernel_interval_holds_zero_only_when_it_straddles_it(monkeypatch, kernel, word):
    # catches an interval wholly below zero said to "hold" zero (a side read from one end only)
    results, reading = _mechanism(monkeypatch, kernel)
    assert f"an interval that {word} zero" in reading.sentence(results)


def test_the_mechanism_family_is_read_from_holms_decision_not_from_raw_p(monkeypatch):
    # Q3a has raw p 0.03 < 0.05 but Holm does not keep it; only Q3b survives the adjustment
    # (catches survivors taken from raw p, which would name Q3a as a finding)
    results, reading = _mechanism(monkeypatch, (-0.05, 0.04))
    assert reading.survivors == ["Q3b"]
    assert reading.raw_below_alpha == ["Q3a", "Q3b"]
    text = reading.sentence(results)
    assert "Q3b reaches the declared level (smallest adjusted p = 0.012)." in text


def test_with_no_survivor_the_split_is_said_to_describe_the_point_estimate_only(monkeypatch):
    results, reading = _mechanism(monkeypatch, (-0.05, 0.04), rejects=(False, False, False), raw_p=(0.03, 0.02, 0.6))
    assert reading.survivors == []
    text = reading.sentence(results)
    assert "none reaches the declared level" in text and "it is not a finding about the mechanism" in text


def test_the_mechanism_shares_are_each_parts_mean_over_q1s(monkeypatch):
    # Q1 mean -0.1, Q3a mean -0.03, Q3b mean -0.07: 30% suppression, 70% smoothness (catches the shares swapped)
    results, reading = _mechanism(monkeypatch, (-0.05, 0.04))
    assert (reading.share_suppression, reading.share_smoothness) == pytest.approx((0.3, 0.7))
    assert reading.identity_error < 1e-12
    assert "70% sits on the smooth-versus-hard contrast" in reading.sentence(results)


# ---------------------------------------------------------------- the gate map


def _cell(interval, tau=1.0, staleness=4, mean=None):
    sapo = Setting("s", "sapo", tau, 1.05, 1e-4, staleness)
    grpo = Setting("g", "grpo", 1.0, 1.0, 1e-4, staleness)
    lo, hi = interval
    return Cell(sapo, grpo, 10, 10, False, _cmp((lo + hi) / 2 if mean is None else mean, lo, hi))


@pytest.mark.parametrize(("interval", "side", "verdict"), [
    ((-0.1, -0.01), -1, "hurts"), ((-0.1, 0.0), 0, "no difference"), ((-0.1, 0.1), 0, "no difference"),
    ((0.0, 0.1), 0, "no difference"), ((0.01, 0.1), 1, "helps"), ((-0.02, 0.1), 0, "no difference")])
def test_a_cells_side_of_zero_is_read_from_both_ends_of_its_interval(interval, side, verdict):
    # catches a side read from one end: (-0.02, 0.1) holds zero although its lower end is below it, and the
    # verdict must follow the interval, not the mean (here the midpoint, on the interval's side of zero or not)
    cell = _cell(interval, mean=0.03)
    assert side_of_zero(cell.comparison) == side
    assert cell.verdict == verdict


@pytest.mark.parametrize(("alpha", "level"), [(0.05, "95%"), (0.1, "90%")])
def test_the_gate_maps_sentence_prints_the_intervals_confidence_level(alpha, level):
    # catches the level printed as alpha ("5%"): the intervals are 1 - alpha intervals
    cells = [_cell((-0.1, -0.01), staleness=8), _cell((-0.05, 0.05), staleness=2), _cell((0.01, 0.1), tau=2.0)]
    standing = where_the_gate_stands(cells, alpha)
    text = standing.sentence()
    assert f"with the {level} interval of the paired gap above zero" in text
    assert "5%" not in text.replace("95%", "")
    assert "in 1 (τ 2, lr 0.0001, M 4)" in text and "below zero, in 1 (τ 1, lr 0.0001, M 8)" in text
    assert "M = 2, 0 above, 0 below, 1 holding zero; M = 4, 1 above, 0 below, 0 holding zero; " \
           "M = 8, 0 above, 1 below, 0 holding zero" in text


def test_a_declared_answers_level_is_holms_decision_not_its_raw_p():
    # raw p 0.01 is below 0.05, but within its family Holm's adjusted p is 0.06: it does not reach the level
    # (catches the decision read from raw p)
    assert _level_text({"family": "F", "p": 0.01, "p_adjusted": 0.06, "reject": False}) == (
        ", Holm-adjusted p = 0.06; does not reach the declared level")
    assert _level_text({"p": 0.04, "p_adjusted": 0.04, "reject": True}) == "; reaches the declared level"
    assert _level_text({"family": "F", "p": 0.01, "p_adjusted": None, "reject": None, "waiting_for": ["G4a"]}) == (
        "; its family's Holm adjustment waits for G4a")
