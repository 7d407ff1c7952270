"""The per-family aggregate and a study's budget at their edges: a stratified interval recomputed by hand, a zero
weight, the pass@k columns, difficulty order, and a declared wall-clock budget that must reach every run."""

import math

import pytest

from sapo_lab.studies.expansion import expand_runs
from sapo_lab.studies.per_family import ScoredPrompt, breakdown, weighted_pass1


def _prompts(family, rates, difficulty=1):
    """One prompt per rate, each with four samples of which rate * 4 are correct."""
    return [ScoredPrompt(family, difficulty, tuple(i < round(4 * r) for i in range(4))) for r in rates]


RECORDS = _prompts("add", [1.0, 0.5]) + _prompts("sub", [0.0, 0.5, 1.0])


def test_the_stratified_interval_uses_each_familys_sample_variance():
    """Catches a family's variance over n instead of n - 1 (and a weight not squared): recomputed here with
    weights 3 : 1 normalised to 0.75 and 0.25, add's rates (1, 0.5): mean 0.75, s^2 = 0.125; sub's (0, 0.5, 1):
    mean 0.5, s^2 = 0.25. Pass@1 = 0.6875; se^2 = 0.75^2 * 0.125 / 2 + 0.25^2 * 0.25 / 3."""
    got = weighted_pass1(RECORDS, {"add": 3.0, "sub": 1.0})
    half = 1.96 * math.sqrt(0.75**2 * 0.125 / 2 + 0.25**2 * 0.25 / 3)
    assert got["pass1"] == pytest.approx(0.6875)
    assert got["pass1_ci95"] == pytest.approx([0.6875 - half, 1.0])  # the upper end capped at 1
    assert got["weights"] == {"add": 0.75, "sub": 0.25}


def test_a_family_declared_with_weight_zero_needs_no_prompts():
    """Catches every weighted family required to have prompts: a family weighted 0 does not enter the aggregate,
    so its absence from the eval split is no error (a family with positive weight and no prompts still is)."""
    got = weighted_pass1(RECORDS, {"add": 1.0, "sub": 1.0, "mul": 0.0})
    assert got["pass1"] == pytest.approx((0.75 + 0.5) / 2)
    with pytest.raises(ValueError, match="weighted family 'mul' has no scored prompts"):
        weighted_pass1(RECORDS, {"add": 1.0, "sub": 1.0, "mul": 0.5})


def test_pass_at_k_columns_only_for_k_above_one():
    """Catches `>= 1` for `> 1`: Pass@1 is the cell's own "pass1"; only k > 1 adds a "pass@k" column."""
    cell = breakdown(RECORDS, pass_k=(1,))["overall"]
    assert set(cell) == {"pass1", "pass1_ci95", "num_prompts", "num_samples"}
    assert set(breakdown(RECORDS, pass_k=(1, 2))["overall"]) == {"pass1", "pass1_ci95", "num_prompts",
                                                                  "num_samples", "pass@2"}


def test_difficulties_are_ordered_as_numbers():
    """Catches difficulty keys sorted as text ("10" before "2")."""
    records = _prompts("add", [1.0], difficulty=10) + _prompts("add", [0.5], difficulty=2)
    got = breakdown(records)
    assert list(got["by_difficulty"]) == ["2", "10"]
    assert list(got["by_family_difficulty"]["add"]) == ["2", "10"]


STUDY = {"name": "edges", "preset": "cpu-tiny", "base": {}, "grid": {}, "methods": {"sapo": {"loss_type": "sapo"}},
         "seeds": [3], "budget": {"max_steps": 2}}


@pytest.mark.parametrize(("budget", "seconds"), [({"max_steps": 2, "max_train_time_s": 60}, 60),
                                                 ({"max_steps": 2}, 0)])
def test_a_declared_wall_clock_budget_reaches_every_run(tmp_path, budget, seconds):
    """Catches the study's max_train_time_s overwritten by the default 0 (no limit): a declared 60 s reaches the
    run's overrides and resolved config; undeclared, it is 0 so a preset's own guard cannot cut runs."""
    (run,) = expand_runs({**STUDY, "budget": budget}, str(tmp_path))
    assert run["overrides"]["max_train_time_s"] == seconds
    assert run["config"].max_train_time_s == seconds
    assert run["config"].optimization.max_steps == 2
