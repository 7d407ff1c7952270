import itertools
import math

import pytest
import torch

from sapo_lab.tasks import make_splits, verify
from sapo_lab.training.evaluation import evaluate, mean_ci, pass_at_k
from sapo_lab.training.model import build_model
from sapo_lab.training.tokenizer import build_char_tokenizer


@pytest.mark.parametrize("n,c,k", [(4, 0, 1), (4, 1, 1), (4, 2, 2), (5, 3, 4), (6, 6, 3), (6, 1, 6)])
def test_pass_at_k_is_the_exact_subset_probability(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    assert math.isclose(pass_at_k(n, c, k), sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_1_is_the_success_rate_not_pass_at_k():
    assert pass_at_k(4, 1, 1) == 0.25 and pass_at_k(4, 1, 4) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_mean_ci():
    m, lo, hi = mean_ci([0.0, 1.0, 0.5, 0.5])
    assert m == 0.5 and lo < 0.5 < hi
    assert mean_ci([0.3]) == (0.3, 0.3, 0.3)


def test_evaluate_report():
    tok = build_char_tokenizer()
    torch.manual_seed(0)
    model = build_model("cpu-micro", vocab_size=len(tok))
    probs = make_splits(seed=0, max_digits=2, num_train=20, num_dev=5, num_eval=12)["eval"]
    res = evaluate(model, tok, probs, reward_fn=verify, num_samples=3, pass_k=(1, 3), max_completion_length=4)
    assert set(res) >= {"pass1", "pass1_ci95", "pass@3", "greedy_accuracy", "by_difficulty", "reasons"}
    assert sum(res["reasons"].values()) == 36
    assert res["pass1_ci95"][0] <= res["pass1"] <= res["pass1_ci95"][1]
    assert sum(v["num_prompts"] for v in res["by_difficulty"].values()) == 12
    assert res == evaluate(model, tok, probs, reward_fn=verify, num_samples=3, pass_k=(1, 3), max_completion_length=4)
