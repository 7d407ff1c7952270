"""verl's temperatures reach compute_policy_loss_sapo only through the ActorConfig fields.

Runs where verl and Hydra import (framework_audit/.venv-verl-hydra, built by framework_audit/build_verl_hydra.sh):
``framework_audit/.venv-verl-hydra/bin/python -m pytest -q tests/integrations/test_verl_settings_reach.py``; skipped elsewhere.
"""

import pytest

pytest.importorskip("hydra", reason="verl's config composition needs Hydra: framework_audit/build_verl_hydra.sh")
pytest.importorskip("verl", reason="verl is not installed here: framework_audit/build_verl_hydra.sh")

from framework_audit.settings_reach_verl import ASKED, _verdict, run_spelling  # noqa: E402


def test_the_example_scripts_spelling_stops_at_verls_startup_validation():
    r = run_spelling("example_scripts")
    assert r["composed"] and not r["validated"] and not r["tau_reached"]
    assert r["composed_values"]["actor.policy_loss.tau_pos"] == ASKED["tau_pos"]
    assert r["composed_values"]["actor.tau_pos"] == 1.0
    assert "unexpected keyword argument 'tau_pos'" in r["outcome"]


def test_hydra_refuses_the_policy_loss_key_without_plus():
    r = run_spelling("policy_loss_without_plus")
    assert not r["composed"] and "Could not override" in r["outcome"]


def test_the_actor_fields_reach_the_loss():
    r = run_spelling("actor_fields")
    assert r["tau_reached"] and r["loss_tau_seen"] == {"tau_pos": [1.3], "tau_neg": [1.7]}


def test_a_loss_that_saw_the_defaults_is_not_reached():
    r = run_spelling("actor_fields")
    r["loss_tau_seen"] = {"tau_pos": [1.0], "tau_neg": [1.05]}
    assert not _verdict(r)["tau_reached"]
