"""One module per framework. Each defines:

- ``FUNCTION``: the dotted name of the framework's own SAPO loss that the adapter calls;
- ``load()``: imports and returns it (the runner records an import error as the framework's result);
- ``SETTINGS``: the framework's options audited, at least "defaults" and "paper" (see :class:`Setting`);
- ``make_loss(function, options)``: a ``loss_fn(logp, old_logp, advantages, mask) -> scalar`` for the audit;
- ``SOURCES``: the upstream files the adapter was written from (:class:`Source`: path inside site-packages,
  line range, SHA-256 of the installed file), so a changed file is noticed when the audit reruns;
- ``EXPECTED``: per setting, the checks a reading of those lines says differ from the paper (the audit
  must find exactly these; tests/conformance/test_conformance_matrix.py holds the committed matrix to them).

An adapter only builds the framework's inputs and calls its function: it never restates the loss.
A setting's ``finding_level`` says whether it calls the loss as the framework's trainer does
("training") or as a function with the audit's arguments ("function").
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The paper's temperatures (Gao et al., 2025); every framework below defaults to them.
TAU_POS, TAU_NEG = 1.0, 1.05


@dataclass(frozen=True)
class Setting:
    """One audited configuration, in the framework's own option names.

    ``options`` None means the framework offers no option that gives this setting (``note`` says why).
    ``level`` is the importance-sampling level whose closed form the audit expects;
    ``finding_level`` is "training" when the adapter calls the loss as the trainer does.
    """

    name: str
    options: dict | None = field(default_factory=dict)
    note: str = ""
    level: str = "token"
    finding_level: str = "function"


@dataclass(frozen=True)
class Source:
    """Lines of an installed upstream file an adapter was written from: ``path`` inside site-packages."""

    path: str
    first: int
    last: int
    sha256: str
    what: str = ""
