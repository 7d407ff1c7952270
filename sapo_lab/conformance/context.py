"""What every check needs: the loss, the paper's settings, the tolerances and what earlier checks found."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .aggregation import PAPER_AGGREGATION, family_weights
from .card import Row
from .names import (  # noqa: F401  (re-exported: the row names live in names.py)
    AGGREGATION,
    BATCH,
    EMPTY_BATCH,
    EMPTY_RESPONSE,
    EXTREME,
    FINITE_DIFFERENCES,
    GATE_SHAPE,
    GRADIENT,
    LEVEL,
    OLD_LOGP,
    ON_POLICY,
    PADDING,
    ROW_ORDER,
    TEMPERATURE_NEG,
    TEMPERATURE_POS,
    TEMPERATURE_ZERO,
    VALUE_AT_ONE,
    ZERO_ADVANTAGE,
)
from .probes import TOLERANCES, Batch, Measurement, Tolerances, call


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
    # shape and the on-policy factors matched (the extreme-ratio check compares values only if
    # the shape did; a value that is not the objective of a right gradient is told as such).
    family: str = PAPER_AGGREGATION
    family_note: str = ""
    # the constant the aggregation probes (every A = 1) measured beside the weights: nan when not identified
    family_scale: float = float("nan")
    k_pos: float = 1.0
    k_neg: float = 1.0
    shape_ok: bool = True
    on_policy_ok: bool = True
    shape_cause: str = ""  # the cause the shape row names, '' when none
    # the on-policy line without its cause, for when the value-vs-gradient check contradicts a constant factor
    constant_factor_summary: str = ""
    # float32 when the loss holds its temperatures in float32 (found by the temperature fit): its
    # arithmetic then carries float32 rounding, so later checks use float32's tolerances.
    held_dtype: torch.dtype | None = None
    # the arguments the loss changed in place in any call (it is given copies; in training they are the caller's)
    changed_inputs: set = field(default_factory=set)

    @property
    def tol(self) -> Tolerances:
        if self.held_dtype is not None and TOLERANCES[self.held_dtype].grad > TOLERANCES[self.dtype].grad:
            return TOLERANCES[self.held_dtype]
        return TOLERANCES[self.dtype]

    def call(self, batch: Batch, **kw) -> Measurement:
        m = call(self.loss_fn, batch, self.dtype, self.device, **kw)
        self.changed_inputs.update(m.changed_inputs)
        return m

    def weights(self, mask: torch.Tensor, count_empty: bool = False) -> torch.Tensor:
        return family_weights(self.family, mask, count_empty)

    def tau(self, sign: float) -> float:
        return self.tau_pos if sign > 0 else self.tau_neg

    def k(self, adv: torch.Tensor) -> torch.Tensor:
        """The measured on-policy factor of each response, by the sign of its advantage."""
        return torch.where(adv > 0, torch.full_like(adv, self.k_pos), torch.full_like(adv, self.k_neg)).double()


def error_row(prop: str, expected: str, message: str) -> Row:
    """A row for a probe on which the adapter raised: the exception's first line is the measurement."""
    return Row(prop, expected, message, "error", "the loss raised on this probe",
               summary=f"{prop}: the loss raised {message}")


def verdict(ok: bool) -> str:
    """``pass`` when the measured property agrees with the paper, else ``differs``."""
    return "pass" if ok else "differs"


def fmt(x: float) -> str:
    """A number in a row's text: six significant digits."""
    return f"{x:.6g}"
