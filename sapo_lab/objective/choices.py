"""The names the loss library accepts for its settings, importable without torch (the config checks against them)."""

IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")  # the first is a kernel's default unless it says otherwise
AGGREGATIONS = ("per_response", "token_pool")
MAX_LOG_RATIO_POLICIES = ("record", "skip", "error")

