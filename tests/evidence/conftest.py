"""Fixtures shared by the evidence tests.

* ``committed_decision``: the decision's inputs read once per test process from the committed studies (about
  100 paired comparisons, each with a bootstrap: several seconds), for every test that reads the committed
  answer rather than planted rows.
"""

import pytest

from sapo_lab.evidence import decision


@pytest.fixture(scope="session")
def committed_decision():
    return decision.evidence()
