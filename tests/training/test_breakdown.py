"""The evaluation breakdown against independent (numpy / brute-force) computations."""

import itertools
import math
import random

import numpy as np
import pytest
import torch

from sapo_lab.studies.per_family import ScoredPrompt, breakdown, mean_pass_at_k, score_problems, weighted_pass1


def _records(seed=0, n=60):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        fam = rng.choice(["add", "sort", "rev"])
        p = {"add": 0.7, "sort": 0.3, "rev": 0.5}[fam]
        out.append(ScoredPrompt(fam, rng.randrange(3), tuple(rng.random() < p for _ in range(4))))
    return out


def test_cells_match_numpy():
    recs = _records()
    res = breakdown(recs, pass_k=(1, 2, 4))
    for fam in ("add", "sort", "rev"):
        rates = np.array([np.mean(r.correct) for r in recs if r.family == fam])
        cell = res["by_family"][fam]
        half = 1.96 * rates.std(ddof=1) / math.sqrt(len(rates))
        assert cell["num_prompts"] == len(rates) and cell["num_samples"] == 4 * len(rates)
        assert math.isclose(cell["pass1"], rates.mean())
        assert np.allclose(cell["pass1_ci95"], [max(0, rates.mean() - half), min(1, rates.mean() + half)])
    for d in ("0", "1", "2"):
        rates = [np.mean(r.correct) for r in recs if str(r.difficulty) == d]
        assert math.isclose(res["by_difficulty"][d]["pass1"], np.mean(rates))
        inner = [np.mean(r.correct) for r in recs if str(r.difficulty) == d and r.family == "sort"]
        assert math.isclose(res["by_family_difficulty"]["sort"][d]["pass1"], np.mean(inner))
    assert math.isclose(res["overall"]["pass1"], np.mean([np.mean(r.correct) for r in recs]))
    assert list(res["by_difficulty"]) == ["0", "1", "2"]


def test_pass_at_k_is_the_subset_probability():
    recs = _records(1, 20)
    for k in (1, 2, 3, 4):
        brute = np.mean([np.mean([any(s) for s in itertools.combinations(r.correct, k)]) for r in recs])
        assert math.isclose(mean_pass_at_k(recs, k), brute)
    with pytest.raises(ValueError):
        mean_pass_at_k(recs, 5)  # more than the 4 samples per prompt


def test_weighted_aggregate_uses_declared_weights_and_the_stratified_interval():
    recs = _records(2, 90)
    w = {"add": 2.0, "sort": 1.0, "rev": 1.0}
    res = weighted_pass1(recs, w)
    by = {f: np.array([np.mean(r.correct) for r in recs if r.family == f]) for f in w}
    wn = {f: v / 4.0 for f, v in w.items()}
    mean = sum(wn[f] * by[f].mean() for f in w)
    se = math.sqrt(sum(wn[f] ** 2 * by[f].var(ddof=1) / len(by[f]) for f in w))
    assert math.isclose(res["pass1"], mean) and np.allclose(res["pass1_ci95"], [mean - 1.96 * se, mean + 1.96 * se])
    pooled = np.mean([np.mean(r.correct) for r in recs])
    assert not math.isclose(res["pass1"], pooled)  # not the pooled mean over prompts
    # with one family the stratified interval is that family's own interval
    single = [r for r in recs if r.family == "add"]
    assert np.allclose(weighted_pass1(single, {"add": 1})["pass1_ci95"], breakdown(single)["by_family"]["add"]["pass1_ci95"])


def test_aggregate_can_improve_while_one_family_regresses():
    before = [ScoredPrompt("a", 0, (True, False))] * 10 + [ScoredPrompt("b", 0, (True, True))] * 10
    after = [ScoredPrompt("a", 0, (True, True))] * 10 + [ScoredPrompt("b", 0, (True, False))] * 10
    w = {"a": 3, "b": 1}
    assert weighted_pass1(after, w)["pass1"] > weighted_pass1(before, w)["pass1"]
    assert breakdown(after, w)["by_family"]["b"]["pass1"] < breakdown(before, w)["by_family"]["b"]["pass1"]


def test_weights_must_match_the_families():
    recs = _records()
    with pytest.raises(ValueError, match="no scored prompts"):
        weighted_pass1(recs, {"add": 1, "sort": 1, "rev": 1, "sub": 1})
    with pytest.raises(ValueError, match="no declared weight"):
        weighted_pass1(recs, {"add": 1, "sort": 1})
    assert weighted_pass1(recs, {"add": 1, "sort": 0, "rev": 0})["pass1"] == breakdown(recs)["by_family"]["add"]["pass1"]


def test_score_problems_uses_the_tasks_verifier():
    from sapo_lab.tasks.suite import MixedSuite
    from sapo_lab.training.model import build_model
    from sapo_lab.training.tokenizer import build_char_tokenizer

    suite = MixedSuite(families={"sorting": {}, "reversal": {}})
    tok = build_char_tokenizer(suite.alphabet)
    torch.manual_seed(0)
    model = build_model("cpu-micro", vocab_size=len(tok))
    probs = suite.make_splits(0, 20, 4, 10)["eval"]
    recs = score_problems(model, tok, suite, probs, num_samples=3, temperature=1.0, max_completion_length=8, seed=1)
    assert [r.family for r in recs] == [suite.family_of(p) for p in probs] and all(len(r.correct) == 3 for r in recs)
    assert recs == score_problems(model, tok, suite, probs, num_samples=3, temperature=1.0, max_completion_length=8, seed=1)

    class AlwaysRight:  # a verifier that accepts anything: every sample must count as correct
        name = "any"

        def verify(self, text, finished, problem):
            return 1.0, "correct"

    assert all(
        all(r.correct)
        for r in score_problems(model, tok, AlwaysRight(), probs, num_samples=2, temperature=1.0, max_completion_length=3)
    )
