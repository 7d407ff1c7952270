"""G3's exploratory readings on a planted tuned contrast: the pick's dev lead and its standard error worked out by
hand, and which of the rule's readings is the declared one (the declared endpoint only, never the best-dev one)."""

from types import SimpleNamespace

import pytest

from sapo_lab.evidence.exploratory import BEST_DEV, pick_margins, tuned_by_staleness
from sapo_lab.evidence.gate_map import Setting

SEEDS = (1, 2, 3)
# method -> (loss, learning rate, dev Pass@1 per seed, held-out Pass@1 per seed)
PLAN = {
    "sa": ("sapo", 1e-4, (0.6, 0.7, 0.8), (0.50, 0.55, 0.60)),   # dev mean 0.7: SAPO's pick
    "sb": ("sapo", 2e-4, (0.5, 0.6, 0.9), (0.40, 0.45, 0.70)),   # dev mean 0.667: the runner-up
    "ga": ("grpo", 1e-4, (0.5, 0.5, 0.5), (0.52, 0.50, 0.61)),   # GRPO's pick
    "gb": ("grpo", 2e-4, (0.4, 0.4, 0.4), (0.45, 0.47, 0.49)),
}


def _run(method, i):
    loss, lr, dev, held_out = PLAN[method]
    record = {"status": "done", "final_dev_pass1": dev[i], "final_pass1": held_out[i],
              "selections": [{"by": "best_dev", "eval": {"weighted": {"pass1": held_out[i] + 0.01}}}]}
    config = {"loss": {"loss_type": loss}, "optimization": {"learning_rate": lr, "steps_per_generation": 8},
              "seed": SEEDS[i]}
    return SimpleNamespace(run_id=f"{method}_seed{SEEDS[i]}", method=method, seed=SEEDS[i], record=record,
                           config=config)


RUNS = {m: [_run(m, i) for i in range(3)] for m in PLAN}
CONTRAST = {"id": "G3", "kind": "tuned", "arms": {"sapo": ["sa", "sb"], "grpo": ["ga", "gb"]},
            "tune_on": "final_dev_pass1", "differ_in": ["optimization.learning_rate"]}
STUDY = SimpleNamespace(name="planted", select=lambda method=None: RUNS[method],
                        declaration={"seeds": list(SEEDS), "analysis": {
                            "endpoint": {"metric": "final_pass1"}, "alpha": 0.05, "contrasts": [CONTRAST]}})
SETTINGS = {m: Setting(m, loss, 1.0, 1.05, lr, 8) for m, (loss, lr, _, _) in PLAN.items()}


def test_the_picks_dev_lead_and_its_standard_error():
    """Catches the standard error over sqrt(n - 1): SAPO's pick (sa) leads its runner-up (sb) by 0.1, 0.1 and
    -0.1 on dev. Mean 1/30; deviations 1/15, 1/15, -2/15, so the sample variance is (6/225) / 2 = 1/75 and the
    standard error sqrt(1/75) / sqrt(3) = 1/15. GRPO's pick leads by 0.1 at every seed: error 0."""
    margins = pick_margins(STUDY)
    sapo, grpo = margins["sapo"], margins["grpo"]
    assert (sapo.pick, sapo.runner_up, grpo.pick, grpo.runner_up) == ("sa", "sb", "ga", "gb")
    assert sapo.margin == pytest.approx(1 / 30) and sapo.standard_error == pytest.approx(1 / 15)
    assert grpo.margin == pytest.approx(0.1) and grpo.standard_error == pytest.approx(0.0, abs=1e-12)
    # had SAPO taken its runner-up: sb - ga on held-out data, -0.12, -0.05 and +0.09, mean -0.08 / 3
    assert sapo.with_runner_up.mean == pytest.approx(-0.08 / 3)


def test_only_the_declared_endpoint_reading_is_declared():
    """Catches the declared flag set on the best-dev reading at the declared M: the declaration compares the final
    held-out Pass@1, so the same rule read on the best-dev checkpoint is exploratory."""
    (final,) = tuned_by_staleness(STUDY, SETTINGS)
    (best,) = tuned_by_staleness(STUDY, SETTINGS, metric=BEST_DEV)
    assert (final.declared, final.checkpoint) == (True, "final")
    assert (best.declared, best.checkpoint) == (False, "best dev")
    assert final.picks == {"sapo": "sa", "grpo": "ga"} and final.rates == {"sapo": 1e-4, "grpo": 1e-4}


# ---------------------------------------------------------------- Q4's tuning caveats on a planted grid

# method -> (loss section, dev Pass@1 per seed, held-out Pass@1 per seed); the arms are declared in this order
GRID = {
    "sapo_tau_x0.5": ({"loss_type": "sapo", "sapo_temperature_pos": 0.5}, (0.30, 0.40), (0.30, 0.34)),
    "sapo": ({"loss_type": "sapo", "sapo_temperature_pos": 1.0}, (0.50, 0.50), (0.40, 0.44)),
    "sapo_tau_x2": ({"loss_type": "sapo", "sapo_temperature_pos": 2.0}, (0.55, 0.65), (0.38, 0.40)),
    "grpo_eps0.1": ({"loss_type": "grpo", "epsilon": 0.1}, (0.40, 0.40), (0.50, 0.52)),
    "grpo": ({"loss_type": "grpo", "epsilon": 0.2}, (0.60, 0.60), (0.45, 0.47)),
    "grpo_eps0.3": ({"loss_type": "grpo", "epsilon": 0.3}, (0.50, 0.54), (0.55, 0.57)),
}


def _grid_run(method, i):
    loss, dev, held_out = GRID[method]
    return SimpleNamespace(run_id=f"{method}_seed{i}", method=method, seed=i, grid={},
                           record={"status": "done", "final_dev_pass1": dev[i], "final_pass1": held_out[i]},
                           config={"loss": loss, "optimization": {"learning_rate": 2e-4}, "seed": i})


GRID_RUNS = {m: [_grid_run(m, i) for i in range(2)] for m in GRID}
TUNING = SimpleNamespace(name="planted", select=lambda method=None: GRID_RUNS[method], declaration={"analysis": {
    "endpoint": {"metric": "final_pass1"}, "alpha": 0.05,
    "tuning": [{"id": "Q4", "tune_on": "final_dev_pass1",
                "arms": {"sapo": list(GRID)[:3], "grpo": list(GRID)[3:]}}]}})


def test_a_pick_at_either_end_of_its_grid_is_at_the_edge():
    """Catches the edge read from the first setting only: SAPO's dev means are 0.35, 0.50 and 0.60, so it picks
    its last setting (τ×2, at the edge); GRPO's are 0.40, 0.60 and 0.52, so it picks the middle one (not at the
    edge). Margins: 0.60 - 0.50 = 0.10 and 0.60 - 0.52 = 0.08; on held-out data τ×2 (0.39) ranks second behind
    τ 1 (0.42), and GRPO ε 0.2 (0.46) third behind ε 0.3 (0.56) and ε 0.1 (0.51)."""
    from sapo_lab.evidence.confirmatory import tuning_caveats

    got = tuning_caveats(TUNING)
    assert got.chosen == {"sapo": "sapo_tau_x2", "grpo": "grpo"}
    assert got.at_edge == {"sapo": True, "grpo": False}
    assert got.dev_margin == pytest.approx({"sapo": 0.10, "grpo": 0.08})
    assert got.eval_rank == {"sapo": 2, "grpo": 3}
