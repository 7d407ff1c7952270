"""The one-line refusal of a value outside a bound says which side of the bound is allowed, with the sign the
bound has (included: >= or <=; excluded: > or <). The expected lines are written out here."""

import pytest

from sapo_lab.runs.config import load_config


# Catches a bound's message naming the wrong sign (">" for an included lower bound, "<" for an included upper one):
# a user told "must be > 0" for max_train_time_s would not know 0 (no time limit) is allowed.
@pytest.mark.parametrize(("key", "value", "message"), [
    ("max_train_time_s", -1, "config key 'max_train_time_s' = -1 is invalid: must be >= 0"),
    ("temperature", 0, "config key 'rollout.temperature' = 0 is invalid: must be > 0"),
    ("adam_beta1", 1, "config key 'optimization.adam_beta1' = 1 is invalid: must be < 1"),
    ("cold_start.target_pass1", 1.5, "config key 'cold_start.target_pass1' = 1.5 is invalid: must be <= 1"),
])
def test_a_bounds_message_gives_its_sign(key, value, message):
    with pytest.raises(ValueError) as refused:
        load_config("micro", {key: value})
    assert str(refused.value) == message
