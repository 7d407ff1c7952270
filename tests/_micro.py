"""The micro run of the tests: the smallest config, the reward that makes its updates non-zero, silent output.

Imported as ``from _micro import ...`` (``tests/`` is on ``sys.path`` through ``conftest.py``, and for
``tests/_fault_driver.py`` run as a script).
"""

MICRO = {
    "model.name_or_path": "cpu-micro",
    "task.num_train": 300,
    "task.num_dev": 16,
    "task.num_eval": 16,
    "cold_start.max_updates": 4,
    "cold_start.eval_every": 2,
    "cold_start.batch_size": 16,
    "cold_start.cache_dir": "",
    "rollout.prompts_per_rollout": 4,
    "rollout.num_generations": 4,
    "optimization.max_steps": 4,
    "optimization.warmup_steps": 2,
    "optimization.learning_rate": 1e-2,
    "evaluation.dev_every": 2,
    "evaluation.dev_prompts": 8,
    "evaluation.num_samples": 2,
    "evaluation.pass_k": [1, 2],
    "save_steps": 2,
    "max_train_time_s": 0,
}

# Keyword arguments of train() / Trainer() that silence the run: no log lines, no progress bar.
QUIET = {"log": lambda message: None, "progress": False}


def micro(**extra):
    from sapo_lab.training.config import load_config

    return load_config("cpu-tiny", {**MICRO, **extra})


def parity_reward(text, finished, problem):
    """A reward that varies within groups even for an untrained micro model, so the updates are not zero."""
    return float(len(text) % 2), "wrong"


def metrics_rows(run_dir: str) -> list[dict]:
    """The rows of a run's ``metrics.jsonl``, as written."""
    import json
    import os

    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]
