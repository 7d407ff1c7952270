"""The names of the audited properties (the rows of every report card) and the orders they are shown in."""

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
BATCH = "batch order and size"

ROW_ORDER = (GRADIENT, FINITE_DIFFERENCES, ON_POLICY, GATE_SHAPE, TEMPERATURE_POS, TEMPERATURE_NEG, TEMPERATURE_ZERO,
             AGGREGATION, LEVEL, EXTREME, ZERO_ADVANTAGE, EMPTY_RESPONSE, EMPTY_BATCH, PADDING, OLD_LOGP, VALUE_AT_ONE,
             BATCH)

# Rows that describe a contract or a valid choice, never a difference: they are notes, not checks.
NOTE_ROWS = (OLD_LOGP, VALUE_AT_ONE)

# The order differences are listed in: causes before their consequences (a missing 4/tau also moves the
# closed-form gradient, so the on-policy factor comes first and the closed form last).
SUMMARY_ORDER = (BATCH, ON_POLICY, GATE_SHAPE, FINITE_DIFFERENCES, AGGREGATION, LEVEL, TEMPERATURE_POS, TEMPERATURE_NEG,
                 TEMPERATURE_ZERO, ZERO_ADVANTAGE, PADDING, EXTREME, EMPTY_RESPONSE, EMPTY_BATCH, GRADIENT,
                 OLD_LOGP, VALUE_AT_ONE)

# At which level a card's findings hold.
FINDING_LEVELS = {
    "function": "function, as called with these arguments",
    "training": "training, as the trainer calls it",
}
