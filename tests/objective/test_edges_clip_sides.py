"""The clip's two sides with distinct epsilons: a setting read on the wrong side survives equal defaults."""
import torch

from sapo_lab.objective.clip import clip_is_active


def test_the_lower_bound_uses_eps_low_and_the_upper_eps_high():
    """Catches ``1 - eps_high`` for ``1 - eps_low`` (or the reverse on the upper side): with eps_low = 0.1 and
    eps_high = 0.3 the live band is (0.9, 1.3); equal epsilons, the default, cannot tell the two apart."""
    ratio = torch.tensor([0.85, 0.95, 1.25, 1.35], dtype=torch.float64)
    # A < 0 lives while r > 1 - eps_low = 0.9; A > 0 lives while r < 1 + eps_high = 1.3 (by hand)
    assert clip_is_active(ratio, -1.0, 0.1, 0.3).tolist() == [False, True, True, True]
    assert clip_is_active(ratio, 1.0, 0.1, 0.3).tolist() == [True, True, True, False]
    # the mirror image: eps_low = 0.3, eps_high = 0.1 gives the band (0.7, 1.1)
    assert clip_is_active(ratio, -1.0, 0.3, 0.1).tolist() == [True, True, True, True]
    assert clip_is_active(ratio, 1.0, 0.3, 0.1).tolist() == [True, True, False, False]
