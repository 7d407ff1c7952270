"""The Task protocol: a task defined here, outside the package, is named by the config and trains."""

import json
import os
from dataclasses import dataclass

import pytest
from _micro import QUIET, micro

from sapo_lab.runs.config import load_config
from sapo_lab.tasks import AdditionTask, Problem, Task, make_task, register_task, splits_for
from sapo_lab.training.trainer import Trainer, train


@dataclass(frozen=True)
class EchoTask:
    """Repeat the prompt's letters: 'ab=' -> 'ab'. Registered under no name: reached by import path."""

    length: int = 2
    name = "echo"
    alphabet = "xyz="

    def make_splits(self, seed, num_train, num_dev, num_eval):
        import itertools
        import random

        words = ["".join(w) for w in itertools.product("xyz", repeat=self.length)]
        random.Random(seed).shuffle(words)
        probs = [Problem(w + "=", w, difficulty=0) for w in words]
        return {"eval": probs[:num_eval], "dev": probs[num_eval : num_eval + num_dev], "train": probs[num_eval + num_dev :]}

    def verify(self, completion_text, finished, problem):
        if not finished:
            return 0.0, "truncated"
        return (1.0, "correct") if completion_text == problem.answer else (0.0, "echo-wrong")


ECHO = {"task.name": "test_task_protocol:EchoTask", "task.options": {"length": 3}, "task.num_train": 10,
        "task.num_dev": 8, "task.num_eval": 8, "max_steps": 3}


def test_a_task_defined_in_a_test_file_trains_three_steps(tmp_path):
    run = str(tmp_path / "echo")
    summary = train(micro(**ECHO), run, **QUIET)
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    assert summary["steps"] == 3 and summary["task"] == "test_task_protocol:EchoTask"
    # Every verdict is EchoTask's: the addition verifier would call letters "invalid".
    assert set().union(*(r["rollout/reasons"] for r in rows)) <= {"correct", "echo-wrong", "truncated"}
    assert set(summary["final_eval"]["reasons"]) <= {"correct", "echo-wrong", "truncated"}
    from sapo_lab.training.model import load_model_and_tokenizer

    _, saved_tok = load_model_and_tokenizer(os.path.join(run, "final_model"))
    assert len(saved_tok) == 3 + len(EchoTask.alphabet)  # the char tokenizer is built from task.alphabet


def test_registered_name_options_and_reward_fn_reach_the_run(tmp_path):
    register_task("echo-test")(EchoTask)
    seen = []

    def reward(text, finished, problem):
        seen.append(problem.prompt)
        return 0.5, "half"

    t = Trainer(micro(**{**ECHO, "task.name": "echo-test", "max_steps": 1}), str(tmp_path), reward_fn=reward, **QUIET)
    assert t.task == EchoTask(length=3) and all(len(p.prompt) == 4 for p in t.splits["train"])
    row = t.train_step()
    assert row["rollout/reasons"] == {"half": 16} and row["rollout/reward_mean"] == 0.5 and len(seen) == 16


def test_make_task_builds_and_refuses_with_one_line_errors():
    assert make_task("addition", {"max_digits": 3}) == AdditionTask(1, 3) and isinstance(AdditionTask(), Task)
    for name, options, match in [
        ("nope", None, "unknown task.name 'nope'"),
        ("no_such_module:X", None, "cannot import module 'no_such_module'"),
        ("sapo_lab.tasks:Nope", None, "has no attribute 'Nope'"),
        ("addition", {"digits": 3}, "task.options"),
        ("addition", {"max_digits": 12}, "task.options"),
        ("sapo_lab.tasks:REASONS", None, "not a class or a callable"),
        ("sapo_lab.tasks:count_carries", {"a": 1, "b": 2}, "does not implement the Task protocol"),
    ]:
        with pytest.raises(ValueError, match=match) as info:
            make_task(name, options)
        assert "\n" not in str(info.value)


def test_config_names_the_task_and_its_options():
    cfg = load_config("cpu-tiny", {"task.options.max_digits": "3", "task.num_train": 50})
    assert cfg.task.options == {"max_digits": 3}  # text parsed as JSON
    assert splits_for(cfg)["train"][0].prompt.endswith("=") and len(splits_for(cfg)["train"][0].prompt) == 8
    assert load_config("gpu-gpt2-small").task.options == {"min_digits": 1, "max_digits": 5}
    with pytest.raises(ValueError, match="task.options"):
        load_config("cpu-tiny", {"task.options": '{"max_digits": 0}'})
    with pytest.raises(ValueError, match="unknown task.name"):
        load_config("cpu-tiny", {"task.name": "no_such_task"})


def test_splits_outside_the_alphabet_or_overlapping_are_refused():
    class Leaky(EchoTask):
        alphabet = "xy="  # 'z' is missing

    with pytest.raises(ValueError, match="missing from the task's alphabet"):
        splits_for(micro(**ECHO), Leaky(length=3))

    class Overlapping(EchoTask):
        def make_splits(self, seed, num_train, num_dev, num_eval):
            s = super().make_splits(seed, num_train, num_dev, num_eval)
            return {**s, "dev": s["eval"]}

    with pytest.raises(ValueError, match="overlap"):
        splits_for(micro(**ECHO), Overlapping(length=3))


def test_cold_start_key_includes_the_task():
    from sapo_lab.training.cold_start import cold_start_key

    base = micro()
    assert cold_start_key(base) != cold_start_key(micro(**{"task.options.max_digits": 3}))
    assert cold_start_key(base) != cold_start_key(micro(**{"task.name": "test_task_protocol:EchoTask"}))
