"""Numbers the evidence derives from others, each held to an anchor worked out here by other means: a tuning
pick's lead over its runner-up (the runner-up found here from the run records with json), the temperature whose
gate halves at GRPO's clip (closed form), and the percentile bootstrap's ends (a case whose percentiles are
binomial quantiles)."""

import json
import math
from pathlib import Path

import pytest
from scipy import stats

from sapo_lab.evidence import exploratory
from sapo_lab.evidence.confirmatory import tuning_caveats
from sapo_lab.evidence.paired import bootstrap_interval
from sapo_lab.evidence.results import load_study

ROOT = Path(__file__).resolve().parents[2]


def _declaration(name):
    return json.loads((ROOT / "experiments" / f"{name}.json").read_text())


def _final_dev(study, run_id):
    """Dev Pass@1 at the final checkpoint, read from the run's study_record.json."""
    record = json.loads((ROOT / "results" / study / "runs" / run_id / "study_record.json").read_text())
    (final,) = [s for s in record["selections"] if s["by"] == "final"]
    return final["dev_pass1"]


def _dev_means(study, arms, seeds):
    return {arm: {m: sum(_final_dev(study, f"{m}_seed{s}") for s in seeds) / len(seeds) for m in methods}
            for arm, methods in arms.items()}


def _pick_runner_up_worst(means):
    """(pick, runner-up, worst) of one arm by seed-mean dev: sorted here, best first (ties: the first listed)."""
    order = sorted(means, key=lambda m: -means[m])
    return order[0], order[1], order[2]


def test_g3_pick_margin_is_the_lead_over_the_runner_up_found_from_the_records():
    # catches: the margin measured against the worst setting (or the runner-up taken as the lowest): the
    # runner-up is found here by sorting the dev means read with json, not taken from the function's answer
    (tuned,) = [c for c in _declaration("gate_map")["analysis"]["contrasts"] if c["kind"] == "tuned"]
    seeds = _declaration("gate_map")["seeds"]
    means = _dev_means("gate_map", tuned["arms"], seeds)
    margins = exploratory.pick_margins(load_study("gate_map"))
    for arm, by_method in means.items():
        pick, runner_up, worst = _pick_runner_up_worst(by_method)
        assert by_method[runner_up] > by_method[worst]  # the case this test needs: the two are not tied
        got = margins[arm]
        assert (got.pick, got.runner_up) == (pick, runner_up), arm
        paired = [_final_dev("gate_map", f"{pick}_seed{s}") - _final_dev("gate_map", f"{runner_up}_seed{s}")
                  for s in seeds]
        assert got.margin == pytest.approx(sum(paired) / len(paired), abs=1e-12), arm
        assert got.margin < by_method[pick] - by_method[worst] - 1e-9, arm


@pytest.fixture(scope="module")
def caveats():
    return tuning_caveats(load_study("confirm_addition"))


def test_q4_dev_margin_is_the_lead_over_the_runner_up_found_from_the_records(caveats):
    # catches: Q4's dev margin taken against the worst setting of the arm instead of the runner-up
    declaration = _declaration("confirm_addition")
    (arm,) = declaration["analysis"]["tuning"]
    means = _dev_means("confirm_addition", arm["arms"], declaration["seeds"])
    for name, by_method in means.items():
        pick, runner_up, worst = _pick_runner_up_worst(by_method)
        assert by_method[runner_up] > by_method[worst]
        assert caveats.chosen[name] == pick
        assert caveats.dev_margin[name] == pytest.approx(by_method[pick] - by_method[runner_up], abs=1e-12), name


def test_the_temperature_whose_gate_halves_at_the_clip_is_the_closed_form(caveats):
    # sech²(τ ε / 2) = 1/2  <=>  τ ε / 2 = acosh(√2) = ln(1 + √2), so τ = 2 ln(1 + √2) / ε: 8.8137 at ε = 0.2.
    # Catches: the ratio inverted (ε / 1.76 = 0.11), the half-width taken at r = 1 + ε / 2, or another clip's ε
    config = json.loads((ROOT / "results" / "confirm_addition" / "runs" / "grpo_seed10" / "config.json").read_text())
    epsilon = config["loss"]["epsilon"]
    assert epsilon == 0.2 and caveats.epsilon == epsilon
    tau = 2.0 * math.log(1.0 + math.sqrt(2.0)) / epsilon
    assert caveats.tau_for_clip_width == pytest.approx(tau, rel=1e-12)
    assert caveats.tau_for_clip_width == pytest.approx(8.8137, abs=1e-4)
    assert 1.0 / math.cosh(caveats.tau_for_clip_width * epsilon / 2.0) ** 2 == pytest.approx(0.5, abs=1e-12)


def test_each_sapo_settings_half_point_is_the_closed_form(caveats):
    # r½ = 1 + 2 ln(1 + √2) / τ for each of Q4's SAPO temperatures (read from the runs' configs here).
    # Catches: the half point written as the half-width alone (without the 1), or τ multiplied instead of divided
    for method, half_point in caveats.half_point.items():
        config = json.loads((ROOT / "results" / "confirm_addition" / "runs" / f"{method}_seed10" / "config.json")
                            .read_text())
        tau = config["loss"]["sapo_temperature_pos"]
        assert half_point == pytest.approx(1.0 + 2.0 * math.log(1.0 + math.sqrt(2.0)) / tau, rel=1e-12), method


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_bootstrap_ends_are_the_alpha_over_two_percentiles(seed):
    # Pairs [0, 0, 1, 1]: a resampled mean is Binomial(4, 1/2) / 4, with CDF 1/16, 5/16, 11/16, 15/16, 1. At
    # alpha = 0.1 the 5% and 95% percentiles are 0 and 1 (5% < 1/16; 95% > 15/16), while the 10% and 90%
    # percentiles are 1/4 and 3/4: an end placed at alpha instead of alpha / 2 moves by 0.25. The nearest CDF step is
    # 0.0125 from a percentile asked for, 7 standard errors (0.0017) of a share among 20000 resamples.
    # Catches: either end at alpha (or 1 - alpha) instead of alpha / 2 (1 - alpha / 2).
    exact = stats.binom(4, 0.5)
    assert exact.ppf(0.05) / 4 == 0.0 and exact.ppf(0.95) / 4 == 1.0
    assert exact.ppf(0.10) / 4 == 0.25 and exact.ppf(0.90) / 4 == 0.75
    assert bootstrap_interval([0.0, 0.0, 1.0, 1.0], alpha=0.1, resamples=20000, seed=seed) == (0.0, 1.0)


def test_the_bootstrap_at_the_default_level_reaches_the_extreme_means():
    # at alpha = 0.05 the 2.5% and 97.5% percentiles of the same case are 0 and 1 too (1/16 > 2.5%; 15/16 < 97.5%),
    # and with alpha = 0.5 the 25% and 75% percentiles are 1/4 and 3/4 (5/16 > 25%, 11/16 < 75%).
    # Catches: the default level read as 10% or the two ends taken from one side
    assert bootstrap_interval([0.0, 0.0, 1.0, 1.0], resamples=20000) == (0.0, 1.0)
    assert bootstrap_interval([0.0, 0.0, 1.0, 1.0], alpha=0.5, resamples=20000) == (0.25, 0.75)
