"""Which SAPO temperatures reach twinkle-kit's SAPOLoss when it is built as its models' set_loss builds it.

Runs where twinkle-kit imports (framework_audit/.venv-twinkle_kit, ``bash framework_audit/build_env.sh
twinkle_kit``): ``PYTHONPATH=. framework_audit/.venv-twinkle_kit/bin/python -m pytest -q
tests/integrations/test_twinkle_settings_reach.py``; skipped elsewhere.
"""

import pytest

pytest.importorskip("twinkle", reason="twinkle-kit is not installed here: bash framework_audit/build_env.sh twinkle_kit")

from framework_audit.settings_reach_twinkle import SETTINGS, measure_one  # noqa: E402


def test_a_single_tau_and_clip_range_are_accepted_and_dropped():
    """Catches a spy that reports the keywords asked for instead of what the gate used."""
    result = measure_one(*SETTINGS["single_tau_and_clip_range"])
    assert result["accepted"] and result["dropped"] == ["clip_range", "tau"]
    assert result["tau_seen"] == {"tau_pos": [1.0], "tau_neg": [1.0]} and result["tau_reached"] is False


def test_tau_pos_and_tau_neg_reach_the_gate():
    """Catches a spy that never sees the instance's own values (it would report the defaults for every setting)."""
    result = measure_one(*SETTINGS["tau_pos_and_tau_neg"])
    assert result["tau_seen"] == {"tau_pos": [1.3], "tau_neg": [1.7]} and result["tau_reached"] is True

