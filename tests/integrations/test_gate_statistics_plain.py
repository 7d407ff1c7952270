"""``gate_statistics`` (the ``sapo/`` numbers the TRL diagnostics log) on batches built here with plain torch, so
the main environment tests it without TRL (tests/integrations/test_trl_diagnostics.py checks the same function on
TRL's own log-probs, in TRL's environment only).

The reference below is written token by token in Python floats and numpy: r = exp(z), w = sech²(τ(r - 1)/2)
with τ chosen by the advantage's sign, a response's weight 1 / its length, and only tokens with a nonzero
advantage counted."""

import math

import numpy as np
import pytest
import torch

from sapo_lab.integrations.trl_diagnostics import NAMES, gate_statistics

LENGTHS = [5, 3, 4, 1, 5, 2]
TAU_POS, TAU_NEG = 2.0, 0.5  # distinct, so a temperature chosen by the wrong sign shows


def _batch(seed=1, spread=0.6):
    gen = torch.Generator().manual_seed(seed)
    width = max(LENGTHS)
    mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    logp = -2.0 + 0.5 * torch.randn(len(LENGTHS), width, generator=gen, dtype=torch.float64)
    old = logp + spread * torch.randn(len(LENGTHS), width, generator=gen, dtype=torch.float64)
    old = torch.where(mask.bool(), old, torch.full_like(old, 7.0))  # padding far off: it must be left out
    adv = torch.randn(len(LENGTHS), generator=gen, dtype=torch.float64)
    adv[1] = 0.0  # a response without gradient
    return logp, old, adv, mask


def _reference(logp, old, adv, mask, level):
    ratios, weights, signal, removed = [], [], 0.0, 0.0
    for i, length in enumerate(mask.sum(-1).tolist()):
        a = float(adv[i])
        if a == 0 or length == 0:
            continue
        zs = [float(logp[i, t] - old[i, t]) for t in range(length)]
        if level == "sequence":
            zs = [sum(zs) / length] * length
        tau = TAU_POS if a > 0 else TAU_NEG
        for z in zs:
            r = math.exp(z)
            w = 1.0 / math.cosh(tau * (r - 1.0) / 2.0) ** 2
            ratios.append(r)
            weights.append(w)
            signal += abs(a) * r / length
            removed += abs(a) * r * (1.0 - w) / length
    return {NAMES["ratio_q01"]: float(np.quantile(ratios, 0.01)), NAMES["ratio_q99"]: float(np.quantile(ratios, 0.99)),
            NAMES["max_abs_log_ratio"]: max(abs(math.log(r)) for r in ratios),
            NAMES["gate_weight_mean"]: sum(weights) / len(weights), NAMES["signal_removed"]: removed / signal}


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_statistics_match_a_token_by_token_reference(level):
    # catches: the temperatures swapped by sign, the per-response weight 1/len left out, padding or zero-advantage
    # tokens counted, the sequence level read per token, the quantiles at other levels
    logp, old, adv, mask = _batch(spread=1.5)  # wide enough that a response's mean log ratio moves the gate too
    expected = _reference(logp, old, adv, mask, level)
    assert 0.05 < expected[NAMES["signal_removed"]] < 0.95  # the gate removes some signal, not all
    got = gate_statistics(logp, old, adv, mask, tau_pos=TAU_POS, tau_neg=TAU_NEG, level=level)
    assert set(got) == set(expected)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_one_token_by_hand():
    # one response of one token, log r = ln 2 (r = 2), A = +1, τ+ = 2: w = sech²(1) = 0.41997434161402614, so the
    # gate removes 1 - w of the signal; the quantiles are r itself. Catches: τ- used for a positive advantage
    # (sech²(0.25) = 0.9400..., the value τ- = 0.5 would give)
    logp = torch.tensor([[math.log(2.0)]], dtype=torch.float64)
    got = gate_statistics(logp, torch.zeros_like(logp), torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1),
                          tau_pos=TAU_POS, tau_neg=TAU_NEG)
    w = 0.41997434161402614
    assert got[NAMES["gate_weight_mean"]] == pytest.approx(w, rel=1e-12)
    assert got[NAMES["signal_removed"]] == pytest.approx(1.0 - w, rel=1e-12)
    assert got[NAMES["ratio_q01"]] == pytest.approx(2.0) and got[NAMES["ratio_q99"]] == pytest.approx(2.0)
    assert got[NAMES["max_abs_log_ratio"]] == pytest.approx(math.log(2.0), rel=1e-12)


def test_an_on_policy_batch_reads_ratio_one_and_nothing_removed():
    # TRL passes the current log-probs as the old ones when num_iterations = 1: every r is exactly 1
    logp, _, adv, mask = _batch()
    got = gate_statistics(logp, logp.clone(), adv, mask, tau_pos=TAU_POS, tau_neg=TAU_NEG)
    assert got == {NAMES["ratio_q01"]: 1.0, NAMES["ratio_q99"]: 1.0, NAMES["max_abs_log_ratio"]: 0.0,
                   NAMES["gate_weight_mean"]: 1.0, NAMES["signal_removed"]: 0.0}


def test_a_batch_without_a_signed_token_is_nan_not_zero():
    # catches: an all-zero-advantage batch reported as ratio 1 / nothing removed (TRL's window mean would then
    # average in numbers no token produced)
    logp, old, adv, mask = _batch()
    got = gate_statistics(logp, old, torch.zeros_like(adv), mask, tau_pos=TAU_POS, tau_neg=TAU_NEG)
    assert set(got) == set(NAMES.values()) and all(math.isnan(v) for v in got.values())
