"""The committed settings_reach.json says what its runs measured, and settings_reach.md is that JSON rendered.

The JSON is written by framework_audit/settings_reach_trl.py (TRL's environment) and settings_reach_verl.py
(verl's); tests/integrations/test_trl_settings_reach.py and tests/integrations/test_verl_settings_reach.py rerun them where those
environments exist. Here: the findings the chapter shows, held to the numbers in the file.
"""

import copy
import json

import pytest
import torch

from framework_audit.settings_reach import JSON_PATH, MD_PATH, render_md


@pytest.fixture(scope="module")
def data():
    with open(JSON_PATH) as f:
        return json.load(f)


def test_the_markdown_is_the_json_rendered(data):
    with open(MD_PATH) as f:
        assert f.read() == render_md(data)


def test_a_changed_finding_changes_the_markdown(data):
    changed = copy.deepcopy(data)
    changed["trl"]["settings"]["paper"]["share_r_ne_1"] = 0.25
    rendered = render_md(changed)
    assert rendered != render_md(data)
    assert "is off-policy: a share 0.250 of tokens had r != 1" in rendered


def test_trl_configured_temperatures_reached_the_loss(data):
    run = data["trl"]["settings"]["configured"]
    cfg = run["grpo_config"]
    f32 = [torch.tensor(cfg[k], dtype=torch.float32).item() for k in ("sapo_temperature_pos", "sapo_temperature_neg")]
    assert run["tau_reached"] and run["problems"] == []
    assert run["tau_pos_seen"] == pytest.approx([f32[0]], abs=1e-12)
    assert run["tau_neg_seen"] == pytest.approx([f32[1]], abs=1e-12)
    assert cfg["sapo_temperature_pos"] != 1.0 and cfg["sapo_temperature_neg"] != 1.05  # not the defaults
    assert run["steps_per_generation"] == 2 and run["steps"][1]["share_r_ne_1"] > 0


def test_trl_paper_setting_is_on_policy(data):
    run = data["trl"]["settings"]["paper"]
    assert run["one_update_per_rollout"] and run["share_r_ne_1"] == 0.0
    assert run["gate_weight_range"] == [1.0, 1.0]
    assert "runs on-policy" in render_md(data)


def test_verl_example_overrides_never_reach_the_loss(data):
    s = data["verl"]["settings"]
    example = s["example_scripts"]
    assert example["overrides"][0].startswith("+actor_rollout_ref.actor.policy_loss.tau_pos=")
    assert not example["tau_reached"] and example["composed"] and not example["validated"]
    assert "unexpected keyword argument 'tau_pos'" in example["outcome"]
    assert example["composed_values"]["actor.tau_pos"] == 1.0  # the field the loss reads kept its default
    assert not s["policy_loss_without_plus"]["composed"]
    assert s["actor_fields"]["tau_reached"]
    assert s["actor_fields"]["loss_tau_seen"] == {"tau_pos": [1.3], "tau_neg": [1.7]}


def test_axolotl_temperatures_reached_and_its_paper_setting_is_on_policy(data):
    section = data["axolotl"]
    assert section["trainer"].endswith("AsyncGRPOTrainer")
    assert section["settings"]["configured"]["tau_reached"]
    assert section["settings"]["configured"]["steps"][1]["share_r_ne_1"] > 0
    paper = section["settings"]["paper"]
    assert paper["tau_reached"] and paper["one_update_per_rollout"] and paper["share_r_ne_1"] == 0.0


def test_twinkle_drops_a_single_tau_and_keeps_tau_neg_at_1(data):
    """twinkle-kit 0.5.1: tau and clip_range are accepted by set_loss and dropped (the gate ran at 1.0 / 1.0);
    tau_pos / tau_neg reach it. Catches a section that reads the keywords back instead of the gate's."""
    s = data["twinkle_kit"]["settings"]
    single = s["single_tau_and_clip_range"]
    assert single["accepted"] and not single["tau_reached"] and single["dropped"] == ["clip_range", "tau"]
    assert single["tau_seen"] == {"tau_pos": [1.0], "tau_neg": [1.0]}
    assert s["defaults"]["tau_seen"] == {"tau_pos": [1.0], "tau_neg": [1.0]}  # not the paper's tau_neg = 1.05
    assert s["tau_pos_and_tau_neg"]["tau_reached"]
    assert "| single_tau_and_clip_range | `tau=1.3, clip_range=0.3` | 1.3 / 1.3 | 1 / 1 | clip_range, tau | NO |" \
        in render_md(data)
