import pytest
import torch

from sapo_lab import group_advantages, policy_loss
from sapo_lab.tasks import make_splits, verify
from sapo_lab.training.model import build_model, response_logprobs
from sapo_lab.training.rollout import RolloutBatch, rollout, sample
from sapo_lab.training.tokenizer import build_char_tokenizer


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    tok = build_char_tokenizer()
    model = build_model("cpu-micro", vocab_size=len(tok))
    problems = make_splits(seed=0, max_digits=2, num_train=50, num_dev=5, num_eval=5)["train"][:6]
    return model, tok, problems


def _batch(setup, temperature=1.0, seed=0, G=4, length=5):
    model, tok, problems = setup
    return rollout(
        model,
        tok,
        problems,
        reward_fn=verify,
        num_generations=G,
        max_completion_length=length,
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
    )


def test_layout_and_masks(setup):
    b = _batch(setup)
    n, width = b.input_ids.shape
    prompt_width = len(setup[2][0].prompt)  # fixed-width prompts, one token per character
    assert n == 24 and b.behavior_logp.shape == (24, width - prompt_width) == b.completion_mask.shape
    cm = b.completion_mask
    for i, ep in enumerate(b.episodes):
        assert ep.group == i // 4 and ep.problem is setup[2][i // 4]
        assert int(cm[i].sum()) == len(ep.completion_ids)
        assert cm[i].tolist() == sorted(cm[i].tolist(), reverse=True)  # valid tokens first, then padding
        if ep.finished:
            assert ep.completion_ids[-1] == 1  # EOS is part of the response (and of the loss)
        else:
            assert ep.reason == "truncated" and len(ep.completion_ids) == 5
    assert torch.all(b.behavior_logp[cm == 0] == 0)
    assert torch.equal(b.attention_mask[:, prompt_width:], cm)
    assert b.grouped_rewards().shape == (6, 4)


def test_sampling_is_reproducible_from_the_generator(setup):
    a, b = _batch(setup, seed=3), _batch(setup, seed=3)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.behavior_logp, b.behavior_logp)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_first_minibatch_ratios_are_one(setup, temperature):
    """Behavior log-probs from the sampling pass equal teacher-forced ones before any update."""
    model = setup[0]
    b = _batch(setup, temperature=temperature)
    b.advantages = group_advantages(b.grouped_rewards() + torch.arange(4.0)).reshape(-1)
    mb = b.minibatches(4, generator=torch.Generator().manual_seed(0))[0]
    logp = response_logprobs(model, mb.input_ids, mb.attention_mask, mb.response_mask, temperature=temperature)
    out = policy_loss(logp, mb.behavior_logp, mb.advantages, mb.completion_mask, loss_type="sapo")
    assert out.stats["max_abs_log_ratio"] < 1e-5
    assert abs(out.stats["ratio_q05"] - 1) < 1e-5 and abs(out.stats["ratio_q95"] - 1) < 1e-5


def test_minibatches_partition_the_batch(setup):
    b = _batch(setup)
    with pytest.raises(ValueError, match="advantages"):
        b.minibatches(4)
    b.advantages = torch.arange(24.0)
    mbs = b.minibatches(4, generator=torch.Generator().manual_seed(1))
    assert [m.input_ids.shape[0] for m in mbs] == [6, 6, 6, 6]
    assert sorted(torch.cat([m.advantages for m in mbs]).tolist()) == list(range(24))
    with pytest.raises(ValueError, match="num_minibatches"):
        b.minibatches(25)


def test_greedy_is_deterministic_and_stops_at_eos(setup):
    model, tok, _ = setup
    ids = torch.tensor([[4, 5, 13, 6, 7, 14]])
    a = sample(model, ids, torch.ones_like(ids), max_new_tokens=6, eos_token_id=1, pad_token_id=0, temperature=0)
    b = sample(model, ids, torch.ones_like(ids), max_new_tokens=6, eos_token_id=1, pad_token_id=0, temperature=0)
    assert torch.equal(a[0], b[0])
    with pytest.raises(ValueError, match="max_new_tokens"):
        sample(model, ids, torch.ones_like(ids), max_new_tokens=0, eos_token_id=1, pad_token_id=0)


def test_rollout_batch_is_a_dataclass():
    import dataclasses

    assert {f.name for f in dataclasses.fields(RolloutBatch)} >= {
        "input_ids",
        "attention_mask",
        "response_mask",
        "behavior_logp",
        "rewards",
        "episodes",
    }
