"""The nearest-key suggestion on both sides of its similarity cutoff (difflib ratio 0.75)."""
from sapo_lab.runs.config import closest_key


def test_a_key_sharing_only_a_suffix_gets_no_suggestion():
    """Catches a loosened cutoff: "qrz_steps" shares only "_steps" with "max_steps", a ratio of
    2 * 6 / (9 + 9) = 0.67, and at most that with any other key ("warmup_steps" shares "r" and "_steps":
    14 / 21), below 0.75, so suggesting a key would mislead."""
    assert closest_key("qrz_steps") is None


def test_a_one_letter_slip_is_suggested():
    """The near side: "max_step" against "max_steps" is 2 * 8 / 17 = 0.94."""
    assert closest_key("max_step") == "max_steps"
