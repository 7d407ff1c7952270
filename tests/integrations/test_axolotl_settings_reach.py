"""The SAPO temperatures reach the loss of Axolotl's async GRPO trainer, and TRL's paper setting is on-policy there.

Runs where Axolotl imports (framework_audit/.venv-axolotl, built by framework_audit/build_axolotl.sh):
``PYTHONPATH=. framework_audit/.venv-axolotl/bin/python -m pytest -q tests/integrations/test_axolotl_settings_reach.py``;
skipped elsewhere. The runs are those of tests/integrations/test_trl_settings_reach.py, on Axolotl's trainer class.
"""

import pytest

pytest.importorskip("axolotl", reason="Axolotl is not installed here: framework_audit/build_axolotl.sh")

from framework_audit.settings_reach_axolotl import trainer_classes  # noqa: E402
from framework_audit.settings_reach_trl import SETTINGS, reach_problems, run_setting, save_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("axolotl_settings_reach")
    model_dir = save_tiny_model(str(base / "model"))
    trainer_class, config_class = trainer_classes()

    def _run(name, after_build=None):
        return run_setting(name, model_dir, str(base), after_build=after_build, trainer_class=trainer_class,
                           config_class=config_class)
    return _run


def test_configured_temperatures_reach_axolotls_loss(run):
    result = run("configured")
    cfg = SETTINGS["configured"]
    assert reach_problems(result, cfg["sapo_temperature_pos"], cfg["sapo_temperature_neg"]) == []
    assert result["steps"][0]["share_r_ne_1"] == 0.0 and result["steps"][1]["share_r_ne_1"] > 0.5


def test_the_paper_setting_is_on_policy_on_axolotls_trainer(run):
    result = run("paper")
    assert result["one_update_per_rollout"] and [s["share_r_ne_1"] for s in result["steps"]] == [0.0, 0.0]


def test_a_temperature_lost_before_axolotls_loss_is_reported(run):
    def lose_tau_neg(trainer):
        trainer.args.sapo_temperature_neg = 1.05

    result = run("configured", after_build=lose_tau_neg)
    problems = reach_problems(result, 1.3, SETTINGS["configured"]["sapo_temperature_neg"])
    assert len(problems) == 1 and problems[0].startswith("tau_neg: the loss saw [1.04999")
