"""The micro run of the tests: the smallest config, the reward that makes its updates non-zero, silent output.

Imported as ``from _micro import ...`` (``tests/`` is on ``sys.path`` through ``conftest.py``, and for
``tests/_fault_driver.py`` run as a script).
"""

# Where the tests' run departs from the book's ``micro`` preset, and why: four steps with a checkpoint and a
# dev evaluation every two (resume and fault tests stop and restart between them), a learning rate at which one
# update changes what the model samples, cpu-tiny's data sizes and answer length.
MICRO = {
    "task.num_train": 300,
    "task.num_dev": 16,
    "task.num_eval": 16,
    "rollout.max_completion_length": 5,
    "optimization.max_steps": 4,
    "optimization.warmup_steps": 2,
    "optimization.learning_rate": 1e-2,
    "evaluation.dev_every": 2,
    "save_steps": 2,
}
PRESET = "micro"

# Keyword arguments of train() / Trainer() that silence the run: no log lines, no progress bar.
QUIET = {"log": lambda message: None, "progress": False}


def micro(**extra):
    from sapo_lab.runs.config import load_config

    return load_config(PRESET, {**MICRO, **extra})


def micro_args(**extra) -> list[str]:
    """The micro run as command-line arguments: ``--config micro`` and one flag per key."""
    args = ["--config", PRESET]
    for key, value in {**MICRO, **extra}.items():
        args += [f"--{key}", ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return args


def parity_reward(text, finished, problem):
    """A reward that varies within groups even for an untrained micro model, so the updates are not zero."""
    return float(len(text) % 2), "wrong"


def metrics_rows(run_dir: str) -> list[dict]:
    """The rows of a run's ``metrics.jsonl``, as written."""
    import json
    import os

    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def untimed_rows(run_dir: str) -> list[dict]:
    """The rows without their ``time/`` keys: seconds on this machine, the only keys two equal runs may differ in."""
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in metrics_rows(run_dir)]


def torch_coin_reward(text, finished, problem):
    """A stochastic reward: a coin from torch's global generator (the one user of that generator in the loop)."""
    import torch

    return float(torch.rand(()) < 0.5), "wrong"
