"""The kernel registry: each row's metadata agrees with what its kernel does, and every reader picks up a new row."""

import pytest
import torch

from sapo_lab import LOSS_TYPES, policy_loss
from sapo_lab.objective.clip import check_clip_eps
from sapo_lab.objective.diagnostics import token_sequence_weights
from sapo_lab.objective.registry import (
    CLIP_EPSILONS,
    IMPORTANCE_SAMPLING_LEVELS,
    KERNELS,
    Kernel,
    resolved_level,
)

SETTINGS = {"tau_pos": 0.8, "tau_neg": 1.7, "clip_eps_low": 0.25, "clip_eps_high": 0.3}


def ratio_grid():
    """50 responses whose mean log ratio runs over [-1.2, 1.2] in steps of 0.1, each with A > 0 and A < 0.

    Tokens of a response differ by +-0.05 around its mean, so token and sequence level differ;
    lengths 2 and 3 keep the mean on the grid. Float64 throughout.
    """
    z_row = torch.linspace(-1.2, 1.2, 25, dtype=torch.float64).repeat(2)
    adv = torch.cat([torch.full((25,), 0.9), torch.full((25,), -1.1)]).double()
    z = z_row[:, None] + torch.tensor([-0.05, 0.05, 0.0], dtype=torch.float64)
    mask = torch.ones_like(z, dtype=torch.bool)
    mask[::2, 2] = False
    logp = -torch.linspace(0.1, 3.0, z.numel(), dtype=torch.float64).view_as(z)
    return logp, logp - z, adv, mask


def loss_gradient(name, level=None, settings=SETTINGS, batch=None):
    logp, behavior, adv, mask = batch or ratio_grid()
    x = logp.clone().requires_grad_(True)
    out = policy_loss(x, behavior, adv, mask, loss_type=name, importance_sampling_level=level, **settings)
    return torch.autograd.grad(out.loss, x)[0], out.stats


# --- a throwaway kernel: registering it is the only edit -------------------------------------------

def _band_surrogate(z, adv, eps_low, eps_high):
    """A hard clip on both sides of r = 1 (the corner of the §14.2 square no built-in kernel fills)."""
    with torch.no_grad():
        r = torch.exp(z)
        inside = (r > 1.0 - eps_low) & (r < 1.0 + eps_high)
        bound = torch.clamp(r, 1.0 - eps_low, 1.0 + eps_high) - 1.0
    return torch.where(inside, torch.expm1(torch.where(inside, z, torch.zeros_like(z))), bound), inside


def _band_log_weights(z, adv, inside):
    minus_inf = torch.full_like(z, float("-inf"))
    return torch.where(inside, torch.zeros_like(z), minus_inf), torch.where(inside, z, minus_inf)


@pytest.fixture
def band_kernel(monkeypatch):
    """Registers ``test_band`` for one test; monkeypatch removes it again afterwards."""
    kernel = Kernel("test_band", "a hard clip to [1 - eps_low, 1 + eps_high] on both sides of r = 1",
                    reads=CLIP_EPSILONS, check=check_clip_eps, token_surrogate=_band_surrogate,
                    log_weights=_band_log_weights, hard_clip=True)
    monkeypatch.setitem(KERNELS, kernel.name, kernel)
    return kernel


def test_a_registered_kernel_reaches_policy_loss_and_its_stats(band_kernel):
    """Mistake caught: policy_loss dispatching on its own if/elif or tuple, so a new row is refused or
    silently trained with another kernel's surrogate; or the stats keeping their own list of clips."""
    logp, behavior, adv, mask = ratio_grid()
    grad, stats = loss_gradient("test_band")
    z = logp - behavior
    inside = (torch.exp(z) > 0.75) & (torch.exp(z) < 1.3) & mask
    assert bool((grad[mask & ~inside] == 0).all()) and bool((grad[inside] != 0).all())  # both sides cut
    assert stats["loss_type"] == "test_band" and stats["importance_sampling_level"] == "token"
    assert stats["clip_frac"] == pytest.approx(float(inside[mask].logical_not().double().mean()))
    with pytest.raises(ValueError, match="eps"):  # its row's check runs on the settings it reads
        policy_loss(*ratio_grid(), loss_type="test_band", clip_eps_low=1.5)


def test_a_registered_kernel_reaches_config_metrics_comparison_and_trl(band_kernel, tmp_path):
    """Mistake caught: config validation, the metrics row (clip_frac None versus absent), the gradient
    comparison or the TRL export keeping their own list of loss types, so the new row fails there
    or, for TRL, is exported under a name TRL does not have."""
    from _micro import micro

    from sapo_lab.integrations.trl import grpo_config_kwargs
    from sapo_lab.training.metrics import metrics_row
    from sapo_lab.training.rollout import RolloutBatch
    from sapo_lab.training.update import UpdateResult, comparison_kwargs

    cfg = micro(**{"loss.loss_type": "test_band"})
    assert cfg.loss.resolved_importance_sampling_level() == "token"
    assert comparison_kwargs(cfg.loss)["loss_type"] == "test_band"
    logp, behavior, adv, mask = ratio_grid()
    weights = token_sequence_weights(logp, behavior, adv, mask, loss_type="test_band")
    assert bool((weights["token"] != 0).any())
    with pytest.raises(ValueError, match=r"loss\.loss_type"):
        grpo_config_kwargs(cfg)

    n, prompt, tokens = 4, 2, 3
    batch = RolloutBatch(
        input_ids=torch.zeros(n, prompt + tokens, dtype=torch.long), attention_mask=torch.ones(n, prompt + tokens),
        response_mask=torch.cat([torch.zeros(n, prompt), torch.ones(n, tokens)], dim=1),
        behavior_logp=torch.zeros(n, tokens), rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]), num_generations=2,
        entropy=torch.full((n, tokens), 0.5), advantages=torch.tensor([1.0, -1.0, 1.0, -1.0]))

    def row(loss_type):  # a step whose minibatches measured nothing: no stats
        return metrics_row(1, batch, [UpdateResult(0.0, 0.0, 0)], lr=0.0, loss_type=loss_type, counters={},
                           step_s=1.0, model_s=0.5, elapsed_s=1.0)

    assert "losses/clip_frac" in row("test_band") and row("test_band")["losses/clip_frac"] is None  # a clip with nothing measured
    assert "losses/clip_frac" not in row("sapo")  # no clip at all


# --- each row's metadata against its kernel's behaviour --------------------------------------------

@pytest.mark.parametrize("name", LOSS_TYPES)
def test_hard_clip_flag_matches_where_the_gradient_vanishes(name):
    """Mistake caught: a row with the wrong hard_clip flag: clip_frac missing for a clip (the metrics row
    would then read 'no clip' as 'nothing measured'), or reported for a smooth gate that never reaches 0."""
    grad, stats = loss_gradient(name)
    mask = ratio_grid()[3]
    silent = (grad == 0) & mask  # every advantage is non-zero, so a silent token is a clipped one
    if KERNELS[name].hard_clip:
        assert bool(silent.any()) and not bool(silent[mask].all())
        assert stats["clip_frac"] == pytest.approx(float(silent[mask].double().mean()))
    else:
        assert not bool(silent.any()) and "clip_frac" not in stats


@pytest.mark.parametrize("name", LOSS_TYPES)
def test_log_weights_are_the_derivative_of_the_rows_surrogate(name):
    """Mistake caught: a row whose log_weights belong to another kernel (say gauss with SAPO's gate):
    the loss would be right and every signal_removed/coef statistic would describe a different kernel.
    The derivative is taken by central differences of the forward, independent of any custom backward."""
    k = KERNELS[name]
    z = torch.linspace(-3.0, 3.0, 41, dtype=torch.float64).repeat(2)
    adv = torch.cat([torch.full((41,), 0.7), torch.full((41,), -1.3)]).double()
    settings = [SETTINGS[s] for s in k.reads]
    surrogate = lambda x: k.token_surrogate(x, adv, *settings)[0]  # noqa: E731
    h = 1e-6
    derivative = (surrogate(z + h) - surrogate(z - h)) / (2 * h)
    state = k.token_surrogate(z, adv, *settings)[1]
    log_gate, log_coef = k.log_weights(z, adv, state.double() if state.is_floating_point() else state)
    torch.testing.assert_close(torch.exp(log_coef), derivative, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(log_coef, z + log_gate)  # the coefficient is r w(r)
    assert bool((log_gate <= 0).all())  # a gate keeps at most the whole unclipped update


@pytest.mark.parametrize("name", LOSS_TYPES)
def test_a_kernel_reads_exactly_the_settings_its_row_names(name):
    """Mistake caught: a surrogate that ignores a setting its row names (SAPO's sign rule passing tau_pos
    twice) or depends on one it does not name: the settings check and the docs would describe dead knobs."""
    base, _ = loss_gradient(name)
    for setting, value in SETTINGS.items():
        moved, _ = loss_gradient(name, settings={**SETTINGS, setting: value * 1.5})
        assert torch.equal(moved, base) == (setting not in KERNELS[name].reads), setting


@pytest.mark.parametrize("name", LOSS_TYPES)
def test_the_resolved_level_is_the_one_policy_loss_trains_at_and_config_and_trl_report(name):
    """Mistake caught: the default importance-sampling level worked out in several places that drift
    apart (config resolving gspo to token while policy_loss trains on sequence ratios would make the
    pooled ratio quantiles describe ratios the loss never saw; TRL would train another loss)."""
    from _micro import micro

    from sapo_lab.integrations.trl import grpo_config_kwargs

    level = resolved_level(name)
    default, stats = loss_gradient(name)
    assert torch.equal(default, loss_gradient(name, level)[0]) and stats["importance_sampling_level"] == level
    for other in set(KERNELS[name].levels) - {level}:
        assert not torch.allclose(default, loss_gradient(name, other)[0])
    cfg = micro(**{"loss.loss_type": name})
    assert cfg.loss.resolved_importance_sampling_level() == level
    if KERNELS[name].trl_loss_type is not None:
        assert grpo_config_kwargs(cfg)["importance_sampling_level"] == level


@pytest.mark.parametrize(("name", "level"), [(k.name, lvl) for k in KERNELS.values() for lvl in IMPORTANCE_SAMPLING_LEVELS
                                             if lvl not in k.levels])
def test_a_level_the_kernel_lacks_is_refused_everywhere_with_one_line(name, level):
    """Mistake caught: the level rule enforced by policy_loss but not by config validation (a run that
    fails at its first update) or not by the gradient comparison (which would compare another loss)."""
    from _micro import micro

    logp, behavior, adv, mask = ratio_grid()
    for call, key in ((lambda: policy_loss(logp, behavior, adv, mask, loss_type=name, importance_sampling_level=level),
                       "importance_sampling_level"),
                      (lambda: micro(**{"loss.loss_type": name, "loss.importance_sampling_level": level}),
                       r"loss\.importance_sampling_level"),
                      (lambda: token_sequence_weights(logp, behavior, adv, mask, loss_type=name), name)):
        with pytest.raises(ValueError, match=key) as err:
            call()
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", LOSS_TYPES)
def test_the_gradient_comparison_runs_a_kernel_with_the_same_gate(name):
    """Mistake caught: a token twin with another gate (gspo -> sapo), so the token/sequence comparison
    logged for a gspo run would describe a loss that run never trained."""
    from sapo_lab.runs.config import LossConfig
    from sapo_lab.training.update import comparison_kwargs

    twin = comparison_kwargs(LossConfig(loss_type=name))["loss_type"]
    assert set(IMPORTANCE_SAMPLING_LEVELS) <= set(KERNELS[twin].levels)
    for level in KERNELS[name].levels:
        assert torch.equal(loss_gradient(name, level)[0], loss_gradient(twin, level)[0])


def test_loss_types_is_the_registry_in_its_public_order():
    """Mistake caught: a LOSS_TYPES kept apart from the registry (a new kernel missing from the book's
    tables and the CLI), or a reordered registry reordering the public tuple the book iterates."""
    from sapo_lab.objective import losses

    assert LOSS_TYPES == losses.LOSS_TYPES == tuple(KERNELS)
    assert LOSS_TYPES[:5] == ("sapo", "grpo", "gspo", "sapo_directional", "gauss")
    assert all(k.name == name and k.summary and "\n" not in k.summary for name, k in KERNELS.items())
