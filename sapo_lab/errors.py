"""The two failures that callers tell apart by type, never by the words of a message."""


class NonFiniteError(FloatingPointError, ValueError):
    """A NaN or inf where a finite number is required (logits, log-probs, advantages).

    A ``ValueError`` too, so that code which refuses bad input with ``ValueError`` keeps
    catching it.
    """


class TrainingDiverged(RuntimeError):
    """A NaN/inf loss, gradient or sample: the run stops, the last good checkpoint stays."""
