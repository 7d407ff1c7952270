"""Every seed a run derives from its ``seed``, named, in one place.

The formulas are frozen: committed results were produced with them, and changing one
changes which prompts, samples and minibatch orders a run sees. Each random stream
gets its own generator, so one stream's consumption never shifts another's.

One stream does not follow the run seed: the cold start's dev checks (which decide when
supervised training stops) use the update number as their seed, so two run seeds that
reach the same update see the same dev samples there.
"""

from __future__ import annotations

import torch


def model_init_seed(seed: int) -> int:
    """The freshly built model's initial weights (before the cold start)."""
    return seed


def cold_start_batch_seed(seed: int) -> int:
    """Which training problems each supervised cold-start update draws."""
    return seed + 1_000_003


def cold_start_dev_eval_seed(update: int) -> int:
    """The dev samples of the cold start's stopping check after ``update`` updates (independent of the run seed)."""
    return update


def held_out_eval_seed(seed: int) -> int:
    """The held-out evaluation of the cold start (and the ``eval`` command's)."""
    return seed * 7919


def final_eval_seed(seed: int) -> int:
    """The held-out evaluation of the final model, and of every checkpoint a study selects."""
    return seed * 7919 + 1


def dev_eval_seed(seed: int, step: int) -> int:
    """The dev Pass@1 monitor at rollout step ``step``."""
    return seed * 1_000_003 + step


def data_seed(seed: int) -> int:
    """Which training prompts each rollout draws."""
    return seed * 3 + 11


def shuffle_seed(seed: int) -> int:
    """How each rollout's responses are shuffled into minibatches."""
    return seed * 3 + 12


def sample_seed(seed: int) -> int:
    """The tokens sampled in rollouts."""
    return seed * 3 + 13


def global_seed(seed: int) -> int:
    """torch's global generator, set once the model is ready (saved and restored with each checkpoint);
    the ``eval`` and ``sample`` commands set it too, once their model is loaded."""
    return seed


def sample_command_seed(seed: int) -> int:
    """The tokens the ``sample`` command draws to show a few answers."""
    return seed


def run_generators(seed: int, device: torch.device) -> dict[str, torch.Generator]:
    """The training loop's generators: ``data`` and ``shuffle`` on the CPU, ``sample`` on the model's device."""
    return {
        "data": torch.Generator().manual_seed(data_seed(seed)),
        "shuffle": torch.Generator().manual_seed(shuffle_seed(seed)),
        "sample": torch.Generator(device=device).manual_seed(sample_seed(seed)),
    }
