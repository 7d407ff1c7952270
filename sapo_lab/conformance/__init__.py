"""Conformance audit for any SAPO loss implementation.

An adapter is any callable ``loss_fn(logp, old_logp, advantages, mask) -> scalar tensor``;
:func:`audit` probes it with small batches and reads only its value and its gradient in
``logp``, so it knows nothing about the framework behind it. The returned :class:`ReportCard`
says its verdict first (``CONFORMS`` or ``DIFFERS in N of M checks``), one line per
difference, and puts each measured behaviour next to the paper's (review §3-10)::

    card = audit(my_loss, name="my framework", tau_pos=1.0, tau_neg=1.05)
    print(card); card.passed; card.row(AGGREGATION).values["aggregation"]

``python -m sapo_lab conformance module:function`` runs it from the command line. Names are
resolved on first use, so that the command line's ``--help`` does not import torch.
"""

import importlib

from .names import (
    AGGREGATION,
    BATCH,
    EMPTY_BATCH,
    EMPTY_RESPONSE,
    EXTREME,
    FINDING_LEVELS,
    FINITE_DIFFERENCES,
    GATE_SHAPE,
    GRADIENT,
    LEVEL,
    NOTE_ROWS,
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

# name -> the submodule that defines it (imported, with torch, the first time the name is read)
_WHERE = {"AGGREGATIONS": "aggregation", "ReportCard": "card", "Row": "card", "AdapterError": "engine",
          "audit": "engine", "check_adapter": "engine", "DTYPES": "probes", "TOLERANCES": "probes"}
_RENAMED = {"AGGREGATIONS": "FAMILIES"}


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), _RENAMED.get(name, name))
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AGGREGATION", "AGGREGATIONS", "BATCH", "DTYPES", "EMPTY_BATCH", "EMPTY_RESPONSE", "EXTREME", "FINDING_LEVELS",
    "FINITE_DIFFERENCES", "GATE_SHAPE", "GRADIENT", "LEVEL", "NOTE_ROWS", "OLD_LOGP", "ON_POLICY", "PADDING",
    "ROW_ORDER", "TEMPERATURE_NEG", "TEMPERATURE_POS", "TEMPERATURE_ZERO", "TOLERANCES", "VALUE_AT_ONE",
    "ZERO_ADVANTAGE", "AdapterError", "ReportCard", "Row", "audit", "check_adapter",
]
