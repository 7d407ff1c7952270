"""Planted paired comparisons for the decision's tests: ten seeds' SAPO-minus-GRPO gaps, compared by the package's
own paired test (``compare``), and gate-map cells holding them."""

import functools

from sapo_lab.evidence.gate_map import Cell, Setting
from sapo_lab.evidence.paired import compare

SEEDS = tuple(range(20, 30))
BELOW = [-0.1 + 0.01 * i for i in range(10)]  # mean -0.055: every seed below zero, the t interval excludes zero
NEAR = [0.004 if i % 2 else -0.002 for i in range(10)]  # mean +0.001, the interval holds zero


def comparison(gaps):
    return _comparison_of(tuple(gaps))


@functools.cache  # planted rows repeat a few gap lists; each comparison runs a 20,000-resample bootstrap
def _comparison_of(gaps):
    return compare({s: (0.5 + g, 0.5) for s, g in zip(SEEDS, gaps, strict=True)}, "sapo", "grpo")


def cell(lr, m, gaps, tau=1.0):
    """The gate map's cell at learning rate ``lr`` and staleness ``m`` whose comparison holds ``gaps``."""
    sapo = Setting(f"sapo_{lr}_{m}_{tau}", "sapo", tau, tau * 1.05, lr, m)
    grpo = Setting(f"grpo_{lr}_{m}", "grpo", 1.0, 1.05, lr, m)
    return Cell(sapo, grpo, 10, 10, False, comparison(gaps))
