"""One sample-and-score path (sapo_lab.training.rollout.sample_and_score) behind rollouts, held-out evaluation
and the per-family breakdown.

Each test names the mistake it catches."""

import json
import os
import sys

import pytest
import torch
from _micro import QUIET, micro

import sapo_lab.training.rollout as rollout_mod
from sapo_lab.studies.per_family import breakdown, score_problems
from sapo_lab.tasks import AdditionTask, make_task
from sapo_lab.training.evaluation import evaluate, generate_answers
from sapo_lab.training.model import build_model
from sapo_lab.training.rollout import rollout
from sapo_lab.training.tokenizer import build_char_tokenizer


class OddLength:
    """A verifier an untrained model passes about half the time, so verdicts differ from sample to sample."""

    name = "odd-length"

    def verify(self, text, finished, problem):
        return (1.0, "correct") if len(text) % 2 else (0.0, "wrong")


@pytest.fixture(scope="module")
def micro_model():
    torch.manual_seed(0)
    tok = build_char_tokenizer()
    model = build_model("cpu-micro", vocab_size=len(tok))
    problems = make_task("addition", {}).make_splits(seed=0, num_train=10, num_dev=5, num_eval=30)["eval"]
    return model, tok, problems


def test_breakdown_scores_exactly_the_samples_evaluation_scores(micro_model):
    """Catches: the breakdown sampling on its own (another chunking, another decode rule, another generator
    order), which would make a selected checkpoint's Pass@1 disagree with the evaluation of the same model."""
    model, tok, problems = micro_model
    task = OddLength()
    gen = torch.Generator().manual_seed(11)
    _, reasons = generate_answers(model, tok, problems, reward_fn=task.verify, num_samples=3, temperature=1.0,
                                  max_completion_length=5, generator=gen)
    records = score_problems(model, tok, task, problems, num_samples=3, temperature=1.0, max_completion_length=5,
                             seed=11)
    flat = [c for r in records for c in r.correct]
    assert 0 < sum(flat) < len(flat)  # the verdicts vary: equality below is not all-True or all-False
    assert flat == [why == "correct" for why in reasons]
    report = evaluate(model, tok, problems, reward_fn=task.verify, num_samples=3, temperature=1.0,
                      max_completion_length=5, pass_k=(1, 3), greedy=False, seed=11)
    cells = breakdown(records, {task.name: 1.0}, pass_k=(1, 3))["overall"]
    assert cells["pass1"] == report["pass1"] and cells["pass1_ci95"] == report["pass1_ci95"]
    assert cells["pass@3"] == report["pass@3"]


def _patch_everywhere(monkeypatch, func, wrapper):
    """Replace ``func`` in every loaded sapo_lab module that binds it."""
    for name, module in list(sys.modules.items()):
        if name.startswith("sapo_lab") and module is not None:
            for attr, value in list(vars(module).items()):
                if value is func:
                    monkeypatch.setattr(module, attr, wrapper)


def test_rollouts_evaluation_and_breakdown_all_sample_through_one_function(micro_model, monkeypatch):
    """Catches: a caller that samples with ``sample`` directly again (a fourth copy of the chunking and of
    the decode-before-EOS rule)."""
    model, tok, problems = micro_model
    calls, inside = [], []
    real_path, real_sample = rollout_mod.sample_and_score, rollout_mod.sample

    def path(*args, **kwargs):
        calls.append(kwargs["samples_per_prompt"])
        inside.append(True)
        try:
            return real_path(*args, **kwargs)
        finally:
            inside.pop()

    def sample(*args, **kwargs):
        assert inside, "sampled outside sample_and_score"
        return real_sample(*args, **kwargs)

    _patch_everywhere(monkeypatch, real_path, path)
    _patch_everywhere(monkeypatch, real_sample, sample)
    rollout(model, tok, problems[:2], reward_fn=OddLength().verify, num_generations=4, max_completion_length=4)
    evaluate(model, tok, problems[:3], reward_fn=OddLength().verify, num_samples=2, greedy=True)
    score_problems(model, tok, OddLength(), problems[:3], num_samples=2, temperature=1.0, max_completion_length=4)
    assert calls == [4, 1, 1, 1]  # rollout (G per prompt), evaluation sampled and greedy, breakdown


def test_selected_final_checkpoint_reproduces_the_runs_final_evaluation(tmp_path, monkeypatch):
    """Catches: the study's per-family scoring re-deriving the eval temperature (here 0.8, not the rollout's 1.0),
    the eval split, or the final-eval seed differently from the trainer's final evaluation."""
    from sapo_lab.studies.selected_eval import evaluate_selected
    from sapo_lab.training.trainer import train

    monkeypatch.setattr(AdditionTask, "verify", lambda self, text, finished, problem: OddLength().verify(text, finished, problem))
    cfg = micro(max_steps=2, eval_temperature=0.8)
    run = str(tmp_path / "run")
    summary = train(cfg, run, **QUIET)
    assert 0 < summary["final_pass1"] < 1
    choice = evaluate_selected(run, cfg, {"by": "final"}, num_samples=cfg.evaluation.num_samples)
    assert choice["step"] == 2
    assert choice["eval"]["overall"]["pass1"] == summary["final_pass1"]
    assert choice["eval"]["overall"]["pass1_ci95"] == summary["final_pass1_ci95"]
    with open(os.path.join(run, "summary.json")) as f:
        assert json.load(f)["final_eval"]["temperature"] == 0.8
