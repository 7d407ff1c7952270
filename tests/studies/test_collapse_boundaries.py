"""A study's declared collapse criteria (``sapo_lab/studies/verdicts.py``) read exactly at each boundary.

The module docstring states the rules: ``below`` is ``metric < threshold``, ``above`` is ``metric > threshold``,
``drop_from_best`` is ``metric < fraction * best`` once the best so far is at least ``min_best``, each for
``patience`` consecutive measurements. Each value here sits on a boundary or one step off it, typed by hand."""

import pytest

from sapo_lab.studies.verdicts import collapse_verdict


def _rows(values, key="rollout/entropy_mean"):
    return [{"step": i + 1, key: v} for i, v in enumerate(values)]


@pytest.mark.parametrize(("value", "collapsed"), [(0.2999, True), (0.3, False), (0.3001, False)])
def test_below_is_strictly_below_the_threshold(value, collapsed):
    # catches: `<=` (a metric that sits exactly at the declared floor is not collapse)
    rows = _rows([1.0, value])
    assert collapse_verdict(rows, [{"metric": "entropy", "kind": "below", "threshold": 0.3}])["collapsed"] is collapsed


@pytest.mark.parametrize(("value", "collapsed"), [(2.0001, True), (2.0, False), (1.9999, False)])
def test_above_is_strictly_above_the_threshold(value, collapsed):
    # catches: `>=`, and `above` read as `below` (the first row, 1.0, would fire at step 1)
    rows = _rows([1.0, value])
    got = collapse_verdict(rows, [{"metric": "entropy", "kind": "above", "threshold": 2.0}])
    assert got["collapsed"] is collapsed
    assert got["step"] == (2 if collapsed else None)


@pytest.mark.parametrize(("last", "collapsed"), [(0.29, True), (0.3, False), (0.31, False)])
def test_a_drop_to_exactly_the_fraction_of_the_best_is_not_collapse(last, collapsed):
    # best so far 0.6, fraction 0.5: the bound is 0.3 (exactly, in binary too: 0.6 * 0.5 is an exact halving).
    # Catches: `<=` in the drop test, and the fraction applied to the first value (0.4) instead of the best
    rows = _rows([0.4, 0.6, last], key="eval/dev_pass1")
    drop = {"metric": "dev_pass1", "kind": "drop_from_best", "fraction": 0.5}
    assert collapse_verdict(rows, [drop])["collapsed"] is collapsed


@pytest.mark.parametrize(("min_best", "collapsed"), [(0.59, True), (0.6, True), (0.61, False)])
def test_a_best_exactly_at_min_best_counts(min_best, collapsed):
    # the best so far is 0.6; "counted only once the best so far is at least min_best", so 0.6 counts.
    # Catches: `>` for min_best (a best exactly at the declared floor ignored)
    rows = _rows([0.6, 0.1], key="eval/dev_pass1")
    drop = {"metric": "dev_pass1", "kind": "drop_from_best", "fraction": 0.5, "min_best": min_best}
    assert collapse_verdict(rows, [drop])["collapsed"] is collapsed


@pytest.mark.parametrize(("patience", "step"), [(1, 2), (2, 3), (3, None)])
def test_patience_counts_consecutive_measurements_and_a_recovery_resets_them(patience, step):
    # entropy below 0.5 at steps 2 and 3 only (two in a row), then recovered: patience 2 fires at step 3,
    # patience 3 never. Catches: `>` for patience (fires one measurement late, or never at the last row),
    # the run not reset by a recovery, the reported step the first bad one instead of the one that fired
    rows = _rows([1.0, 0.4, 0.3, 0.9, 0.2])
    got = collapse_verdict(rows, [{"metric": "entropy", "kind": "below", "threshold": 0.5, "patience": patience}])
    assert got["step"] == step and got["collapsed"] is (step is not None)
    if step is not None:
        assert got["reason"] == f"entropy below for {patience} measurement(s)" and got["criterion"] == 0
