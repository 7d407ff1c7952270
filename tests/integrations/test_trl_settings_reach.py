"""TRL's SAPO temperatures reach the loss its GRPOTrainer computes, and its documented paper setting is on-policy.

Each run trains TRL's own GRPOTrainer for two optimizer steps on a tiny model saved by the test, with the spy of
``framework_audit/settings_reach_trl.py`` on the trainer's loss. The planted cases are a temperature lost
between the config and the loss, a check against a temperature other than the configured one, and a loss type
without the SAPO gate: each must be reported.
"""

import pytest
import torch
from _trl import require_trl

require_trl()

from framework_audit.settings_reach_trl import SETTINGS, reach_problems, run_setting, save_tiny_model  # noqa: E402


def _f32(x: float) -> float:
    return torch.tensor(x, dtype=torch.float32).item()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("settings_reach")
    return save_tiny_model(str(base / "model")), str(base)


@pytest.fixture(scope="module")
def configured(dirs):
    return run_setting("configured", *dirs)


def test_configured_temperatures_reach_the_loss(configured):
    cfg = SETTINGS["configured"]
    assert reach_problems(configured, cfg["sapo_temperature_pos"], cfg["sapo_temperature_neg"]) == []
    assert configured["tau_pos_seen"] == pytest.approx([_f32(cfg["sapo_temperature_pos"])], abs=1e-12)
    assert configured["tau_neg_seen"] == pytest.approx([_f32(cfg["sapo_temperature_neg"])], abs=1e-12)
    assert configured["loss_calls"] == 2


def test_reusing_the_rollout_moves_the_ratios(configured):
    first, second = configured["steps"]
    assert not configured["one_update_per_rollout"]
    assert first["share_r_ne_1"] == 0.0  # the first step trains on a rollout of the same weights
    assert second["share_r_ne_1"] > 0.5 and second["max_abs_r_minus_1"] > 1e-3
    assert configured["gate_weight_range"][0] < 1.0  # moved ratios are attenuated by the gate


def test_the_documented_paper_setting_is_on_policy(dirs):
    paper = run_setting("paper", *dirs)
    assert paper["one_update_per_rollout"] and paper["steps_per_generation"] == 1
    assert [s["share_r_ne_1"] for s in paper["steps"]] == [0.0, 0.0]
    assert all(s["max_abs_r_minus_1"] == 0.0 for s in paper["steps"])
    assert paper["gate_weight_range"] == [1.0, 1.0]  # the weight GRPO gives: SAPO trains as GRPO here
    assert reach_problems(paper, 1.0, 1.05) == []


def test_a_check_against_another_temperature_fails(configured):
    problems = reach_problems(configured, 1.0, SETTINGS["configured"]["sapo_temperature_neg"])
    assert len(problems) == 1 and problems[0].startswith("tau_pos: the loss saw [1.2999")


def test_a_temperature_lost_before_the_loss_is_reported(dirs):
    def lose_tau_pos(trainer):
        trainer.args.sapo_temperature_pos = 1.0

    lost = run_setting("configured", *dirs, after_build=lose_tau_pos)
    cfg = SETTINGS["configured"]
    problems = reach_problems(lost, cfg["sapo_temperature_pos"], cfg["sapo_temperature_neg"])
    assert problems == ["tau_pos: the loss saw [1.0], configured 1.3"]


def test_a_loss_without_the_gate_is_reported(dirs):
    def use_grpo(trainer):
        trainer.loss_type = "grpo"

    result = run_setting("configured", *dirs, after_build=use_grpo)
    assert not any(s["gate_seen"] for s in result["steps"])
    assert "the SAPO gate was not computed at every loss call" in reach_problems(result, 1.3, 1.7)
