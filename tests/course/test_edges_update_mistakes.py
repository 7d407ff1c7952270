"""The assignment's update_loss mistakes are computed from the advantages the handout asks for (each group's
rewards minus their mean, over their population standard deviation plus 1e-6), so a student who made only the
named mistake is matched. The expected values are a plain re-implementation here, in float64."""

import pytest
import torch

from sapo_lab.course.mistakes import UPDATE_LOSS

TAU_POS, TAU_NEG = 0.5, 2.0  # distinct, non-default: a swap shows


def _inputs():
    gen = torch.Generator().manual_seed(5)
    behavior = -1.0 + 0.3 * torch.randn(4, 3, generator=gen, dtype=torch.float64)
    logp = behavior + 0.4 * torch.randn(4, 3, generator=gen, dtype=torch.float64)
    # two prompts of G = 2: population std 0.5 and 1.0, sample std 0.5 sqrt 2 and sqrt 2 (they differ)
    rewards = torch.tensor([[1.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.float64)
    return dict(logp=logp, behavior_logp=behavior, rewards=rewards, mask=mask, tau_pos=TAU_POS, tau_neg=TAU_NEG)


def _plain_loss(logp, behavior_logp, rewards, mask, tau_pos, tau_neg, *, sign=-1.0):
    # group advantages by hand: (1, 0) -> (+1, -1) and (2, 0) -> (+1, -1), each over (std + 1e-6)
    adv = torch.tensor([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 1.0 / (1.0 + 1e-6), -1.0 / (1.0 + 1e-6)],
                       dtype=torch.float64)
    r = torch.exp(logp - behavior_logp)
    a = adv[:, None].expand_as(r)
    tau = torch.where(a > 0, torch.full_like(a, tau_pos), torch.full_like(a, tau_neg))
    per_token = sign * a * 4 / tau * torch.sigmoid(tau * (r - 1))
    return ((per_token * mask).sum(-1) / mask.sum(-1)).mean()


def _named(text):
    (found,) = [m for m in UPDATE_LOSS if m.name.startswith(text)]
    return found


@pytest.mark.parametrize("name, expected", [
    ("tau_pos and tau_neg swapped", lambda kw: _plain_loss(**{**kw, "tau_pos": TAU_NEG, "tau_neg": TAU_POS})),
    ("the objective returned instead of the loss", lambda kw: _plain_loss(**kw, sign=1.0)),
])
def test_a_named_update_mistake_uses_the_handouts_advantages(name, expected):
    # catches: the mistakes' default advantages built with the sample std (G - 1) or without the group mean, so
    # a student whose only mistake is the named one is told something else
    kw = _inputs()
    got = _named(name).compute(**kw)
    assert float(got) == pytest.approx(float(expected(kw)), rel=1e-12)
