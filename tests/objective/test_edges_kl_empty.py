"""kl_to_reference with an empty response in the batch, against values worked out by hand.

Per token k3 = e^d - d - 1 with d = ref_logp - logp. With ref_logp = 0 and logp = -ln 2, d = ln 2 and
k3 = 2 - ln 2 - 1 = 1 - ln 2; with logp = 0, k3 = 0. The batch: response 0 empty, response 1 one token
(k3 = 1 - ln 2), response 2 two tokens (0 and 1 - ln 2, mean (1 - ln 2) / 2).

* per_response: the mean over the two non-empty responses, ((1 - ln 2) + (1 - ln 2) / 2) / 2 = 0.75 (1 - ln 2);
  an empty response counted as 0 would give 0.5 (1 - ln 2).
* token_pool: 2 (1 - ln 2) over 3 real tokens.
"""

import math

import pytest
import torch

from sapo_lab.objective.losses import kl_to_reference

HALF = -math.log(2.0)
K3 = 1.0 - math.log(2.0)


def _batch():
    logp = torch.tensor([[HALF, HALF], [HALF, 0.0], [0.0, HALF]], dtype=torch.float64)
    mask = torch.tensor([[0, 0], [1, 0], [1, 1]], dtype=torch.float64)
    return logp, torch.zeros_like(logp), mask


@pytest.mark.parametrize("aggregation, expected", [("per_response", 0.75 * K3), ("token_pool", 2 * K3 / 3)])
def test_an_empty_response_is_left_out_of_the_kl_mean(aggregation, expected):
    # catches: the empty response averaged in as 0 (per_response), or padding counted among the tokens
    logp, ref, mask = _batch()
    assert float(kl_to_reference(logp, ref, mask, aggregation)) == pytest.approx(expected, rel=1e-12)
