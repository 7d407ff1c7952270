"""A replication's rule in words (``Replication.rule``): the clause "any side when the committed interval holds
zero" is said exactly when the committed 95% interval holds zero, its ends included, as
``sapo_lab/studies/replicate.py`` declares ("any side when the committed interval holds zero"; an interval
[lo, hi] holds zero when lo <= 0 <= hi). Each interval below is typed with its side worked out by hand."""

import pytest

from sapo_lab.evidence.decision import Replication

ANY_SIDE = ", any side when the committed interval holds zero, as here"


def _replication(committed_interval, verdict="consistent"):
    return Replication(study="confirm_addition", question="Q1",
                       comparison={"mean": -0.05, "t_interval": (-0.09, -0.01), "p": 0.02}, verdict=verdict,
                       kernels="aaaa", setting=None, cpu=None, committed_kernels=("bbbb",), committed_cpu=None,
                       committed={"mean": -0.04, "t_interval": committed_interval, "p": 0.05})


@pytest.mark.parametrize("interval, holds_zero", [
    ((-0.125, 0.0), True),     # the upper end on zero: holds it
    ((0.0, 0.25), True),       # the lower end on zero: holds it
    ((-0.125, 0.25), True),    # strictly around zero
    ((-0.125, -0.0625), False),  # below zero
    ((0.0625, 0.25), False),   # above zero
])
def test_the_any_side_clause_follows_the_committed_interval_ends_included(interval, holds_zero):
    # catches: the bound made strict (lo < 0 < hi), which drops the clause for an interval ending on zero
    words = _replication(interval).rule()
    assert words.startswith("the two 95% intervals overlap")
    assert words.endswith(ANY_SIDE) is holds_zero


def test_the_clause_belongs_to_the_consistent_verdict_only():
    # catches: the clause added to a "not consistent" verdict, whose rule has no side exemption
    assert ANY_SIDE not in _replication((-0.125, 0.0), verdict="not consistent").rule()
