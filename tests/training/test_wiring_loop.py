"""The loop's own wiring around the update: which split, verifier, temperature and size each evaluation gets,
what the run's counters count, how rewards are grouped into advantages, the KL reference, the cold start.

Mutations of sapo_lab/training/ tried one at a time, and the test that fails for each:

test_each_evaluation_gets_its_split_verifier_and_settings
    dev Pass@1 skipped at a last step off the dev_every cadence; the dev monitor or the final evaluation
    scored with the rollouts' shaped reward instead of the task's verifier; the final evaluation on the dev
    split; the dev monitor ignoring dev_prompts, or sampling at the rollout temperature instead of
    eval_temperature; the held-out evaluation ignoring ``greedy``
test_dev_evaluation_time_counts_as_training_time
    the dev evaluation's seconds left out of time/elapsed_s (and so of max_train_time_s)
test_counters_count_what_each_step_did
    tokens_trained counting every generated token (zero-advantage rows included); verifier calls
    counted per prompt instead of per response; rollout/reward_mean over the first group only
test_the_row_gets_the_runs_gate_temperatures
    sapo_temperature_pos and sapo_temperature_neg swapped on their way to the metrics row
test_step_time_is_split_into_model_work_and_the_rest
    the sampling loop's seconds left out of the model time; time/non_model_frac as the model's share
test_empty_responses_are_summed_over_the_minibatches
    the count of the last minibatch only
test_advantages_are_normalised_within_each_prompts_group
    rewards grouped column-wise (``view(G, -1).t()``) before the group normalisation
test_reference_log_probs_are_taken_at_the_sampling_temperature
    the KL reference's log-probs at T = 1 while sampling at T
test_kl_term_reaches_the_gradient
    the KL term added to the loss detached from the policy's log-probs
test_partial_credit_never_counts_as_solved
    Pass@1 counting any positive reward as solved instead of the verifier's "correct"
test_cold_start_loss_covers_the_answer_and_eos_only
    the supervised loss mask covering the prompt as well
test_cold_start_uses_its_settings
    the cold start ignoring target_pass1 (always max_updates); its batch size hard-coded; its dev checks
    sampling at T = 1 instead of the rollout temperature
test_a_run_ends_with_a_checkpoint_of_its_last_step
    no checkpoint at the end of a run whose last step is off the save_steps cadence
test_a_zero_gradient_minibatch_still_takes_its_optimizer_step
    an all-zero-advantage minibatch skipping optimizer.step()
test_the_summary_reports_the_evaluations_it_names
    pass1_gain with its sign flipped
test_torchs_generator_follows_the_run_seed_with_a_cached_cold_start
    torch's global generator not seeded from the run seed when the loop starts
test_cold_start_cache_key_covers_what_decides_the_cold_start
    the cache key without the sampling temperature (the dev checks sample at it), or any other input
"""

import math
import time

import pytest
import torch
from _micro import QUIET, metrics_rows, micro, parity_reward, torch_coin_reward, untimed_rows

import sapo_lab.training.trainer  # noqa: F401  binds every function a spy replaces
from sapo_lab.runs.checkpoint import latest_checkpoint
from sapo_lab.tasks import task_for
from sapo_lab.training.cold_start import cold_start_key, sft_batch, train_cold_start
from sapo_lab.training.device import ModelTimer
from sapo_lab.training.evaluation import dev_pass1, evaluate, held_out_eval
from sapo_lab.training.lifecycle import run_summary
from sapo_lab.training.metrics import _loss_columns, metrics_row
from sapo_lab.training.model import build_model, response_logprobs
from sapo_lab.training.rollout import rollout, sample
from sapo_lab.training.tokenizer import build_char_tokenizer
from sapo_lab.training.trainer import Trainer
from sapo_lab.training.update import UpdateResult, minibatch_forward


def _half_the_prompts_rewarded(text, finished, problem):
    """Parity reward on half the prompts (chosen by the prompt's characters), 0 on the rest: every rollout has
    groups whose rewards are all equal (zero advantages) beside groups that vary."""
    if sum(map(ord, problem.prompt)) % 2:
        return 0.0, "wrong"
    return parity_reward(text, finished, problem)


def test_each_evaluation_gets_its_split_verifier_and_settings(tmp_path, spy):
    monitor = spy(dev_pass1)
    evaluations = spy(evaluate)
    cfg = micro(max_steps=3, dev_every=2, dev_prompts=5, temperature=1.3, eval_temperature=0.6, greedy=False)
    trainer = Trainer(cfg, str(tmp_path / "run"), reward_fn=parity_reward, **QUIET)
    summary = trainer.train()
    verify, dev, held_out = trainer.task.verify, trainer.splits["dev"], trainer.splits["eval"]

    assert [c.args[5] for c in monitor] == [2, 3]  # every dev_every steps, and the last step off the cadence
    assert all(c.args[4] == verify and c.args[3] == dev for c in monitor)
    dev_runs = [c for c in evaluations if c.args[2] == dev[:5]]
    assert len(dev_runs) == 2 and len(dev[:5]) == 5 < len(dev)
    assert all(c.kwargs["temperature"] == 0.6 and c.kwargs["reward_fn"] == verify for c in dev_runs)
    final = evaluations[-1]
    assert final.args[2] == held_out and final.args[2] != dev
    assert final.kwargs["reward_fn"] == verify and final.kwargs["temperature"] == 0.6
    assert final.kwargs["greedy"] is False and "greedy_accuracy" not in summary["final_eval"]


def test_dev_evaluation_time_counts_as_training_time(tmp_path, spy):
    spy(dev_pass1, on_call=lambda call: time.sleep(0.2))
    run = str(tmp_path / "run")
    summary = Trainer(micro(max_steps=2, dev_every=2), run, reward_fn=parity_reward, **QUIET).train()
    first, second = metrics_rows(run)
    assert second["time/dev_eval_s"] >= 0.2
    grown = second["time/elapsed_s"] - first["time/elapsed_s"]
    assert math.isclose(grown, second["time/step_s"] + second["time/dev_eval_s"], rel_tol=1e-9)
    assert summary["train_wall_s"] == second["time/elapsed_s"]


def test_counters_count_what_each_step_did(tmp_path, spy):
    calls = []

    def counting_reward(text, finished, problem):
        calls.append(problem)
        return _half_the_prompts_rewarded(text, finished, problem)

    batches = spy(rollout)
    run = str(tmp_path / "run")
    Trainer(micro(max_steps=3, skip_zero_advantage=True), run, reward_fn=counting_reward, **QUIET).train()
    rows = metrics_rows(run)
    trained = generated = 0
    zero_rows = 0
    for row, call in zip(rows, batches, strict=True):
        b = call.result
        kept = b.advantages != 0
        zero_rows += int((~kept).sum())
        step_trained = int(b.completion_mask[kept].sum())
        trained, generated = trained + step_trained, generated + int(b.completion_mask.sum())
        assert row["optim/tokens_trained"] == step_trained
        assert row["counters/tokens_trained"] == trained and row["counters/tokens_generated"] == generated
        rewards = [ep.reward for ep in b.episodes]
        assert math.isclose(row["rollout/reward_mean"], sum(rewards) / len(rewards), rel_tol=1e-6)
    assert zero_rows > 0 and 0 < trained < generated  # the premise: some rows were skipped, some trained
    assert rows[-1]["counters/verifier_calls"] == len(calls) == sum(len(c.result.episodes) for c in batches)


def test_the_row_gets_the_runs_gate_temperatures(tmp_path, spy):
    rows = spy(metrics_row)
    cfg = micro(max_steps=1, sapo_temperature_pos=1.3, sapo_temperature_neg=0.7)
    Trainer(cfg, str(tmp_path / "run"), reward_fn=parity_reward, **QUIET).train()
    assert rows[0].kwargs["tau_pos"] == 1.3 and rows[0].kwargs["tau_neg"] == 0.7
    assert rows[0].kwargs["loss_type"] == "sapo"


def test_step_time_is_split_into_model_work_and_the_rest(tmp_path, spy):
    """Sampling is model work: slowed down here by 0.3 s a call, it must show in the step's model time."""
    batches, built = spy(rollout), spy(metrics_row)
    spy(sample, on_call=lambda call: time.sleep(0.3))
    run = str(tmp_path / "run")
    Trainer(micro(max_steps=2, dev_every=5), run, reward_fn=parity_reward, **QUIET).train()
    for call, row, b in zip(built, metrics_rows(run), batches, strict=True):
        step_s, model_s = call.kwargs["step_s"], call.kwargs["model_s"]
        assert 0.3 <= b.result.sample_s <= model_s <= step_s
        assert row["time/step_s"] == step_s
        assert row["time/non_model_frac"] == pytest.approx(1 - model_s / step_s, rel=1e-9)


def test_empty_responses_are_summed_over_the_minibatches():
    updates = [UpdateResult(loss=0.0, grad_norm=1.0, tokens_trained=3, stats={"empty_responses": n}) for n in (2, 0, 1)]
    columns = _loss_columns(updates, [u.stats for u in updates], "sapo")
    assert columns["empty_responses"] == 3


def test_advantages_are_normalised_within_each_prompts_group(tmp_path, spy):
    batches = spy(rollout)
    Trainer(micro(max_steps=2), str(tmp_path / "run"), reward_fn=_half_the_prompts_rewarded, **QUIET).train()
    varied = 0
    for call in batches:
        b = call.result
        for g in sorted({ep.group for ep in b.episodes}):
            rows = [i for i, ep in enumerate(b.episodes) if ep.group == g]
            assert len({b.episodes[i].problem.prompt for i in rows}) == 1  # a group is one prompt's answers
            rewards = [b.episodes[i].reward for i in rows]
            adv = [float(b.advantages[i]) for i in rows]
            if len(set(rewards)) == 1:
                assert adv == [0.0] * len(rows)
                continue
            varied += 1
            assert abs(sum(adv)) < 1e-5  # centred within the group
            assert all((a > 0) == (r > sum(rewards) / len(rewards)) for a, r in zip(adv, rewards, strict=True))
    assert varied > 0


def test_reference_log_probs_are_taken_at_the_sampling_temperature(tmp_path, spy):
    """At the first rollout the policy is still the cold start, which is the KL reference: the reference's
    log-probs of the sampled tokens must equal the behavior log-probs, both at the sampling temperature."""
    batches = spy(rollout)
    cfg = micro(max_steps=1, beta=0.1, temperature=1.6, device="cpu")
    Trainer(cfg, str(tmp_path / "run"), reward_fn=parity_reward, **QUIET).train()
    b = batches[0].result
    mask = b.completion_mask.bool()
    torch.testing.assert_close(b.ref_logp[mask], b.behavior_logp[mask], atol=1e-5, rtol=1e-5)


def test_kl_term_reaches_the_gradient():
    """With every advantage 0 the policy term has no gradient, so the update's gradient is beta times the
    KL term's, which is not zero once the reference differs from the policy."""
    torch.manual_seed(0)
    cfg = micro(beta=0.3, skip_zero_advantage=False)
    task = task_for(cfg)
    tok = build_char_tokenizer(task.alphabet)
    model = build_model("cpu-micro", vocab_size=len(tok), seed=0)
    batch = rollout(model, tok, task.make_splits(seed=0, num_train=8, num_dev=2, num_eval=2)["train"][:3],
                    reward_fn=parity_reward, num_generations=2, max_completion_length=4,
                    generator=torch.Generator().manual_seed(0))
    batch.advantages = torch.zeros(batch.num_responses)
    noise = torch.randn(batch.behavior_logp.shape, generator=torch.Generator().manual_seed(1))
    batch.ref_logp = batch.behavior_logp + 0.5 * noise
    mb = batch.minibatches(1)[0]
    forward = minibatch_forward(model, mb, cfg, timer=ModelTimer(torch.device("cpu")), where="test")
    params = [p for p in model.parameters() if p.requires_grad]
    got = torch.autograd.grad(forward.loss, params, allow_unused=True)

    logp = response_logprobs(model, mb.input_ids, mb.attention_mask, mb.response_mask, temperature=cfg.rollout.temperature)
    m = mb.completion_mask.float()
    d = mb.ref_logp - logp
    per_response = ((torch.exp(d) - d - 1) * m).sum(-1) / m.sum(-1)  # k3, per_response aggregation (the default)
    assert cfg.loss.aggregation == "per_response"
    want = torch.autograd.grad(0.3 * per_response.mean(), params, allow_unused=True)
    norm = sum(float(w.norm()) for w in want if w is not None)
    assert norm > 1e-3
    for g, w in zip(got, want, strict=True):
        if w is not None:
            torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-4)


def test_partial_credit_never_counts_as_solved():
    tok = build_char_tokenizer()
    model = build_model("cpu-micro", vocab_size=len(tok), seed=0)
    problems = task_for(micro()).make_splits(seed=0, num_train=4, num_dev=2, num_eval=3)["eval"]
    report = evaluate(model, tok, problems, reward_fn=lambda text, fin, p: (0.5, "partial"), num_samples=2,
                      max_completion_length=4, greedy=True)
    assert report["pass1"] == 0.0 and report["greedy_accuracy"] == 0.0 and report["reward_mean"] == 0.5


def test_cold_start_loss_covers_the_answer_and_eos_only():
    task = task_for(micro())
    tok = build_char_tokenizer(task.alphabet)
    problems = task.make_splits(seed=0, num_train=6, num_dev=2, num_eval=2)["train"]
    ids, attn, loss_mask = sft_batch(tok, problems, torch.device("cpu"))
    for row, keep, p in zip(ids.tolist(), loss_mask.tolist(), problems, strict=True):
        scored = [t for t, k in zip(row, keep, strict=True) if k]
        assert scored == tok(p.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


@pytest.mark.parametrize("target,updates", [(0.0, 2), (1.0, 4)])
def test_cold_start_uses_its_settings(target, updates, spy):
    """Its batch size, its target (checked every eval_every updates) and dev checks that sample at the
    rollout temperature with the task's verifier, one sample per dev problem."""
    batches, checks = spy(sft_batch), spy(evaluate)
    cfg = micro(target_pass1=target, max_updates=4, eval_every=2, batch_size=8, temperature=1.3)
    task = task_for(cfg)
    tok = build_char_tokenizer(task.alphabet)
    model = build_model("cpu-micro", vocab_size=len(tok), seed=0)
    splits = task.make_splits(seed=0, num_train=40, num_dev=4, num_eval=2)
    report = train_cold_start(model, tok, splits, cfg, torch.device("cpu"), log=lambda m: None, task=task)
    assert report["updates"] == updates == len(batches)
    assert all(len(c.args[1]) == 8 for c in batches)
    assert len(checks) == updates // 2
    assert all(c.kwargs["temperature"] == 1.3 and c.kwargs["reward_fn"] == task.verify for c in checks)
    assert all(c.args[2] == splits["dev"] and c.kwargs["num_samples"] == 1 for c in checks)


def test_a_run_ends_with_a_checkpoint_of_its_last_step(tmp_path):
    """Off the save_steps cadence too, so that a finished run can be extended with --resume."""
    run = str(tmp_path / "run")
    Trainer(micro(max_steps=3, save_steps=2), run, reward_fn=parity_reward, **QUIET).train()
    assert latest_checkpoint(run).endswith("step-000003")


def test_a_zero_gradient_minibatch_still_takes_its_optimizer_step(tmp_path, optimizer_steps):
    """With every reward equal, every advantage is 0 and no minibatch is trained, yet each still takes its
    AdamW step (its moments and step count move on as documented in update.py)."""
    cfg = micro(max_steps=2, steps_per_generation=2, **{"cold_start.max_updates": 0})
    run = str(tmp_path / "run")
    Trainer(cfg, run, reward_fn=lambda text, finished, problem: (0.0, "wrong"), **QUIET).train()
    assert len(optimizer_steps) == 4 and all(s.grad_norm == 0 for s in optimizer_steps)
    assert [s.state_steps for s in optimizer_steps] == [0, 1, 2, 3]
    assert metrics_rows(run)[-1]["counters/optimizer_steps"] == 4


def test_the_summary_reports_the_evaluations_it_names(tmp_path, spy):
    reports = spy(held_out_eval)
    cfg = micro(max_steps=2)
    summary = Trainer(cfg, str(tmp_path / "run"), reward_fn=parity_reward, **QUIET).train()
    cold, final = (c.result for c in reports)
    assert summary["cold_start_pass1"] == cold["pass1"] and summary["final_pass1"] == final["pass1"]
    assert summary["cold_start_eval"] == cold and summary["final_eval"] == final
    # The gain is final minus cold start (the micro run's two numbers may well be equal: use unequal ones).
    made_up = run_summary(cfg, "completed", cold={"pass1": 0.25, "pass1_ci95": [0.2, 0.3]},
                          final={"pass1": 0.5, "pass1_ci95": [0.4, 0.6]}, steps=2, elapsed=1.0, counters={}, device="cpu")
    assert made_up["pass1_gain"] == 0.25


def test_torchs_generator_follows_the_run_seed_with_a_cached_cold_start(tmp_path):
    """A second run that takes its cold start from the cache builds no model (whose seeding would also set
    torch's global generator): the loop's own seeding must make a reward drawing from it repeat."""
    cfg = micro(max_steps=2, **{"cold_start.cache_dir": str(tmp_path / "cache")})
    first = Trainer(cfg, str(tmp_path / "trained"), reward_fn=torch_coin_reward, **QUIET)
    first.train()
    torch.rand(1000)  # whatever happens in between
    second = Trainer(cfg, str(tmp_path / "cached"), reward_fn=torch_coin_reward, **QUIET)
    second.train()
    assert first.cold_eval["cold_start"]["cached"] is False and second.cold_eval["cold_start"]["cached"] is True
    assert untimed_rows(str(tmp_path / "trained")) == untimed_rows(str(tmp_path / "cached"))


@pytest.mark.parametrize(
    "change",
    [{"model.name_or_path": "cpu-tiny"}, {"task.options.max_digits": 3}, {"task.num_train": 301}, {"seed": 1},
     {"cold_start.max_updates": 5}, {"cold_start.batch_size": 8}, {"cold_start.sft_learning_rate": 1e-3},
     {"cold_start.eval_every": 3}, {"cold_start.target_pass1": 0.5}, {"rollout.max_completion_length": 6},
     {"rollout.temperature": 0.9}],
)
def test_cold_start_cache_key_covers_what_decides_the_cold_start(change):
    assert cold_start_key(micro(**change)) != cold_start_key(micro())
    assert cold_start_key(micro(**{"cold_start.cache_dir": "/elsewhere", "loss_type": "grpo", "beta": 0.1})) == \
        cold_start_key(micro())
