"""One module per framework. Each defines:

- ``FUNCTION``: the dotted name of the framework's own SAPO loss that the adapter calls;
- ``load()``: imports and returns it (the runner records an import error as the framework's result);
- ``SETTINGS``: the framework's options audited, at least "defaults" and "paper" (see :class:`Setting`);
- ``make_loss(function, options)``: a ``loss_fn(logp, old_logp, advantages, mask) -> scalar`` for the audit.

An adapter only builds the framework's inputs and calls its function: it never restates the loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The paper's temperatures (Gao et al., 2025); every framework below defaults to them.
TAU_POS, TAU_NEG = 1.0, 1.05


@dataclass(frozen=True)
class Setting:
    """One audited configuration, in the framework's own option names.

    ``options`` None means the framework offers no option that gives this setting (``note`` says why).
    ``level`` is the importance-sampling level whose closed form the audit expects.
    """

    name: str
    options: dict | None = field(default_factory=dict)
    note: str = ""
    level: str = "token"
