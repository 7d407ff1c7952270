"""What every check needs: the loss, the paper's settings, the tolerances and what earlier checks found."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .aggregation import PAPER_AGGREGATION, family_weights
from .card import Row
from .probes import TOLERANCES, Batch, Measurement, Tolerances, call

# Property names: the rows of every report card, in this order.
GRADIENT = "per-token gradient (autograd)"
FINITE_DIFFERENCES = "per-token gradient (finite differences of the value)"
ON_POLICY = "on-policy gradient (r = 1)"
GATE_SHAPE = "gradient shape r*w_tau(r)"
TEMPERATURE_POS = "temperature for A > 0"
TEMPERATURE_NEG = "temperature for A < 0"
TEMPERATURE_ZERO = "temperature for A = 0"
AGGREGATION = "aggregation"
LEVEL = "importance-sampling level"
EXTREME = "extreme log-ratios"
ZERO_ADVANTAGE = "zero advantages (equal-reward group)"
EMPTY_RESPONSE = "empty response in a batch"
EMPTY_BATCH = "batch without tokens"
PADDING = "padding tokens"
OLD_LOGP = "behaviour log-probs held constant"
VALUE_AT_ONE = "value at r = 1"

ROW_ORDER = (GRADIENT, FINITE_DIFFERENCES, ON_POLICY, GATE_SHAPE, TEMPERATURE_POS, TEMPERATURE_NEG, TEMPERATURE_ZERO,
             AGGREGATION, LEVEL, EXTREME, ZERO_ADVANTAGE, EMPTY_RESPONSE, EMPTY_BATCH, PADDING, OLD_LOGP, VALUE_AT_ONE)


@dataclass
class Context:
    """What every probe needs: the adapter, the temperatures, the dtype, device and level, and the tolerances."""
    loss_fn: object
    tau_pos: float
    tau_neg: float
    dtype: torch.dtype
    device: object
    level: str
    # Filled in by earlier checks: the aggregation whose weights later checks use (the
    # paper's until identified), the measured on-policy factors, and whether the gate's
    # shape matched (the extreme-ratio check compares values only if it did).
    family: str = PAPER_AGGREGATION
    family_note: str = ""
    k_pos: float = 1.0
    k_neg: float = 1.0
    shape_ok: bool = True

    @property
    def tol(self) -> Tolerances:
        return TOLERANCES[self.dtype]

    def call(self, batch: Batch, **kw) -> Measurement:
        return call(self.loss_fn, batch, self.dtype, self.device, **kw)

    def weights(self, mask: torch.Tensor, count_empty: bool = False) -> torch.Tensor:
        return family_weights(self.family, mask, count_empty)

    def tau(self, sign: float) -> float:
        return self.tau_pos if sign > 0 else self.tau_neg

    def k(self, adv: torch.Tensor) -> torch.Tensor:
        """The measured on-policy factor of each response, by the sign of its advantage."""
        return torch.where(adv > 0, torch.full_like(adv, self.k_pos), torch.full_like(adv, self.k_neg)).double()


def error_row(prop: str, expected: str, message: str) -> Row:
    """A row for a probe on which the adapter raised: the exception's first line is the measurement."""
    return Row(prop, expected, message, "error", "the loss raised on this probe")


def verdict(ok: bool) -> str:
    """``pass`` when the measured property agrees with the paper, else ``differs``."""
    return "pass" if ok else "differs"


def fmt(x: float) -> str:
    """A number in a row's text: six significant digits."""
    return f"{x:.6g}"
