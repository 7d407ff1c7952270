"""Conformance audit for any SAPO loss implementation.

An adapter is any callable ``loss_fn(logp, old_logp, advantages, mask) -> scalar tensor``;
:func:`audit` probes it with small batches and reads only its value and its gradient in
``logp``, so it knows nothing about the framework behind it. Each row of the returned
:class:`ReportCard` puts the measured behaviour next to the paper's (review §3-10)::

    card = audit(my_loss, name="my framework", tau_pos=1.0, tau_neg=1.05)
    print(card.to_markdown()); card.passed; card.row(AGGREGATION).values["aggregation"]

``python -m sapo_lab conformance module:function`` runs it from the command line.
"""

from .aggregation import FAMILIES as AGGREGATIONS
from .card import ReportCard, Row
from .context import (
    AGGREGATION,
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
from .engine import AdapterError, audit, check_adapter
from .probes import DTYPES, TOLERANCES

__all__ = [
    "AGGREGATION", "AGGREGATIONS", "DTYPES", "EMPTY_BATCH", "EMPTY_RESPONSE", "EXTREME", "FINITE_DIFFERENCES",
    "GATE_SHAPE", "GRADIENT", "LEVEL", "OLD_LOGP", "ON_POLICY", "PADDING", "ROW_ORDER", "TEMPERATURE_NEG",
    "TEMPERATURE_POS", "TEMPERATURE_ZERO", "TOLERANCES", "VALUE_AT_ONE", "ZERO_ADVANTAGE",
    "AdapterError", "ReportCard", "Row", "audit", "check_adapter",
]
