"""A run's life around the loop: where its model starts from, what it is trained with, how it ends.

* :func:`start_model`: a fresh run writes ``config.json``, trains (or takes from the
  cache) the cold start, evaluates it on the held-out split, saves both with the run and
  starts ``metrics.jsonl``; a resumed run loads the cold start and its evaluation back;
* :func:`reference_model`, :func:`make_optimizer`: the frozen KL reference and AdamW;
* :func:`finish_model`, :func:`run_summary`: the final model saved and evaluated on the
  held-out split, and what ``summary.json`` says.

Which folder a run may use is :mod:`.run_policy`'s decision, made before any of this.
"""

from __future__ import annotations

import torch

from ..runs.run_folder import RunFolder
from .cold_start import get_cold_start, save_pretrained_atomic
from .evaluation import held_out_eval
from .model import load_model_and_tokenizer
from .seeds import final_eval_seed, held_out_eval_seed


def start_model(cfg, folder: RunFolder, splits, task, device, *, resume: bool, log=print):
    """``(model, tokenizer, cold-start evaluation)`` on ``device`` (see the module docstring)."""
    if resume:
        model, tok = load_model_and_tokenizer(folder.cold_start)
        return model.to(device), tok, folder.read_cold_start_eval()
    folder.write_config(cfg)
    model, tok, report = get_cold_start(cfg, splits, device, log=log, task=task)
    cold_eval = held_out_eval(model, tok, cfg, splits["eval"], task.verify, seed=held_out_eval_seed(cfg.seed))
    cold_eval["cold_start"] = report
    save_pretrained_atomic(model, tok, folder.cold_start)
    folder.write_cold_start_eval(cold_eval)
    folder.start_metrics()
    return model.to(device), tok, cold_eval


def reference_model(cfg, folder: RunFolder, device):
    """The frozen cold-start model for the KL penalty, or None when ``beta == 0``."""
    if cfg.optimization.beta == 0:
        return None
    reference, _ = load_model_and_tokenizer(folder.cold_start)
    return reference.to(device).eval().requires_grad_(False)


def make_optimizer(model, o) -> torch.optim.AdamW:
    """AdamW with the run's ``optimization`` settings (the learning rate is set again at every step)."""
    return torch.optim.AdamW(
        model.parameters(), lr=o.learning_rate, betas=(o.adam_beta1, o.adam_beta2), weight_decay=o.weight_decay
    )


def finish_model(model, tok, cfg, folder: RunFolder, eval_problems, verify) -> dict:
    """Save the final model with the run and return its held-out evaluation (the final-eval seed)."""
    save_pretrained_atomic(model, tok, folder.final_model)
    return held_out_eval(model, tok, cfg, eval_problems, verify, seed=final_eval_seed(cfg.seed))


def run_summary(cfg, status: str, *, cold: dict, final: dict, steps: int, elapsed: float, counters: dict, device) -> dict:
    """What ``summary.json`` holds: the run's outcome, the cold-start and final evaluations, the config."""
    return {
        "status": status,
        "loss_type": cfg.loss.loss_type,
        "task": cfg.task.name,
        "seed": cfg.seed,
        "steps": steps,
        "cold_start_pass1": cold["pass1"],
        "cold_start_pass1_ci95": cold["pass1_ci95"],
        "final_pass1": final["pass1"],
        "final_pass1_ci95": final["pass1_ci95"],
        "pass1_gain": final["pass1"] - cold["pass1"],
        "cold_start_greedy_accuracy": cold.get("greedy_accuracy"),
        "final_greedy_accuracy": final.get("greedy_accuracy"),
        "train_wall_s": elapsed,
        "counters": counters,
        "cold_start_eval": cold,
        "final_eval": final,
        "device": str(device),
        "config": cfg.to_dict(),
    }
