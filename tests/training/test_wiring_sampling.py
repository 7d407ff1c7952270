"""Sampling-side wiring: the training forward at the sampling temperature, and the run seed behind every
random draw (observed at torch's own draw functions, whatever module makes the draw).

Mutations of sapo_lab/training/ tried one at a time, and the test that fails for each:

test_first_minibatch_is_on_policy_at_the_sampling_temperature
    the training forward without the temperature (log-probs at T = 1 while sampling at T);
    response_logprobs ignoring its temperature; sampling ignoring the temperature;
    both of them at T = 1 (ratio 1, but not at the configured temperature);
    logits multiplied by T instead of divided; dropout on in the model (p = 0.1)
test_every_random_draw_follows_the_run_seed
    the data, shuffle, sample or cold-start batch stream seeded with a constant;
    the dev or final evaluation seed without the run seed;
    minibatches shuffled with a fresh, unseeded generator; a sample generator never seeded;
    a stream seeded from the clock (same seed, different draws)
test_initial_weights_follow_the_run_seed
    the model built with a constant seed, or with none
"""

import sys

import pytest
import torch
import torch.nn.functional as F
from _micro import QUIET, metrics_rows, micro, parity_reward
from safetensors.torch import load_file

import sapo_lab.training.trainer  # noqa: F401  binds every function a spy replaces
from sapo_lab.objective.losses import policy_loss
from sapo_lab.training.rollout import rollout
from sapo_lab.training.trainer import train


def _teacher_forced(model, batch, temperature):
    """log pi(token) of each response token at ``temperature``, written out here, independently of the trainer."""
    width = batch.behavior_logp.shape[1]
    positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions).logits
    logp = F.log_softmax(logits[:, -width - 1 : -1].float() / temperature, dim=-1)
    return logp.gather(-1, batch.input_ids[:, -width:, None]).squeeze(-1)


@pytest.mark.parametrize("temperature", [0.7, 1.6])
def test_first_minibatch_is_on_policy_at_the_sampling_temperature(tmp_path, spy, temperature):
    """With one minibatch per rollout, the first update sees the very policy that sampled: the training
    forward's log-probs equal the behavior log-probs (ratio 1), and both are those of the model at T.

    Catches the classic mistake of log-probs at T = 1 for the ratio while sampling at T (the ratio is then
    far from 1 on-policy), either side dropping T, and dropout in the training forward."""
    independent = []
    rollouts = spy(rollout, on_call=lambda c: independent.append(
        (_teacher_forced(c.args[0], c.result, temperature), _teacher_forced(c.args[0], c.result, 1.0))))
    losses = spy(policy_loss)
    cfg = micro(device="cpu", temperature=temperature, steps_per_generation=1, max_steps=1, skip_zero_advantage=False,
                gradient_comparison_every=0)
    train(cfg, str(tmp_path / "run"), reward_fn=parity_reward, **QUIET)

    mask = rollouts[0].result.completion_mask.bool()
    at_t, at_1 = independent[0]
    behavior = rollouts[0].result.behavior_logp
    torch.testing.assert_close(behavior[mask], at_t[mask], atol=1e-4, rtol=0)  # sampled at T
    assert float((at_1 - at_t)[mask].abs().max()) > 0.05  # T changes the log-probs: the check above has teeth
    trained_logp, trained_behavior = losses[0].args[0].detach(), losses[0].args[1]
    assert trained_logp.shape == behavior.shape  # one minibatch: every response, in shuffled order
    ratio_log = (trained_logp - trained_behavior)[losses[0].args[3].bool()]
    assert float(ratio_log.abs().max()) < 1e-4  # on-policy: r = 1
    (row,) = metrics_rows(str(tmp_path / "run"))
    assert row["ratio/max_abs_log_ratio"] < 1e-4 and row["optim/tokens_trained"] == int(mask.sum())


def _frames():
    """The sapo_lab functions on the stack, innermost first: where a draw comes from."""
    frame, chain = sys._getframe(2), []
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("sapo_lab"):
            chain.append(f"{module}.{frame.f_code.co_name}")
        frame = frame.f_back
    return tuple(chain)


DRAWS = ("multinomial", "randperm", "randint", "rand", "randn", "normal", "bernoulli", "poisson")


def _draw_ledger(tmp_path, monkeypatch, seed, name):
    """Every torch draw of one micro run: (function, where from, seed of its generator, what it drew)."""
    ledger = []
    for fn in DRAWS:
        real = getattr(torch, fn)

        def draw(*args, _fn=fn, _real=real, generator=None, **kwargs):
            out = _real(*args, generator=generator, **kwargs) if generator is not None else _real(*args, **kwargs)
            source = generator.initial_seed() if generator is not None else ("global", torch.initial_seed())
            ledger.append((_fn, _frames(), source, out.detach().cpu().clone()))
            return out

        monkeypatch.setattr(torch, fn, draw)
    try:
        train(micro(device="cpu", seed=seed), str(tmp_path / name), reward_fn=parity_reward, **QUIET)
    finally:
        monkeypatch.undo()
    return ledger


def _by_origin(ledger):
    out = {}
    for fn, frames, source, _ in ledger:
        out.setdefault((fn, frames), set()).add(source)
    return out


def test_every_random_draw_follows_the_run_seed(tmp_path, monkeypatch):
    """Every draw a run makes (sampling, prompt choice, minibatch order, cold-start batches, evaluations)
    comes from a generator seeded from the run seed: two seeds never share a generator seed at the same
    place, and one seed repeats every draw. The one documented exception (sapo_lab.training.seeds): the
    cold start's dev checks, seeded by the update number.

    Catches: a stream seeded with a constant or left unseeded (torch's fixed default seed), a fresh
    generator created where a run generator should be used, a stream seeded from the clock."""
    first, again = _draw_ledger(tmp_path, monkeypatch, 3, "a"), _draw_ledger(tmp_path, monkeypatch, 3, "b")
    other = _draw_ledger(tmp_path, monkeypatch, 4, "c")
    assert [d[:3] for d in first] == [d[:3] for d in again]
    assert all(torch.equal(x[3], y[3]) for x, y in zip(first, again, strict=True))
    assert {fn for fn, *_ in first} >= {"multinomial", "randperm", "randint"}  # sampling, shuffle, prompts
    mine, theirs = _by_origin(first), _by_origin(other)
    assert mine.keys() == theirs.keys() and len(mine) >= 5
    for (fn, frames), seeds in mine.items():
        if fn == "multinomial" and any(f.startswith("sapo_lab.training.cold_start.") for f in frames):
            continue  # the cold start's dev checks
        assert not seeds & theirs[(fn, frames)], f"{fn} from {frames[:3]} drew from the same seeds {seeds} for run seeds 3 and 4"


def test_initial_weights_follow_the_run_seed(tmp_path):
    """Without a cold start the saved cold-start model is the freshly built one: its weights follow the run
    seed (equal for one seed, different for two). Catches a constant model seed, and none at all (the
    weights would then depend on whatever ran before)."""

    def initial(seed, name):
        cfg = micro(**{"device": "cpu", "seed": seed, "cold_start.max_updates": 0, "max_steps": 0})
        train(cfg, str(tmp_path / name), **QUIET)
        return load_file(str(tmp_path / name / "cold_start" / "model.safetensors"))

    a, again, b = initial(5, "a"), initial(5, "b"), initial(6, "c")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], again[k]) for k in a)
    assert not any(torch.equal(a[k], b[k]) for k in a if "weight" in k and a[k].dim() == 2)
