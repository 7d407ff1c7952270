"""Planted mistake: the two aggregations swapped."""
from from_handout import *  # noqa: F403
from from_handout import masked_mean as _right


def masked_mean(values, mask, aggregation="per_response"):
    return _right(values, mask, "token_pool" if aggregation == "per_response" else "per_response")
