"""The checkpoints a study's selection rules choose, scored per task family on the eval split."""

from __future__ import annotations

from safetensors.torch import load_model

from ..runs.run_folder import RunFolder
from ..runs.snapshots import CheckpointMissing, weights_for_step
from ..tasks import family_weights, splits_for, task_for
from ..training.evaluation import eval_temperature
from ..training.model import load_model_and_tokenizer
from ..training.seeds import final_eval_seed
from .checkpoint_rules import checkpoint_by_rule
from .per_family import breakdown, score_problems


def evaluate_selected(run_dir: str, cfg, rule: dict, num_samples: int) -> dict:
    """The selection rule's choice and, when its weights exist, the per-family eval breakdown."""
    try:
        choice = checkpoint_by_rule(run_dir, rule["by"], rule.get("value"), saved_only=rule.get("saved_only", False))
    except CheckpointMissing as exc:
        return {**rule, "error": str(exc)}
    if num_samples == 0:
        return choice
    task = task_for(cfg)
    problems = splits_for(cfg, task)["eval"]
    model, tok = load_weights(run_dir, choice["step"])
    records = score_problems(
        model,
        tok,
        task,
        problems,
        num_samples=num_samples,
        temperature=eval_temperature(cfg),
        max_completion_length=cfg.rollout.max_completion_length,
        # the trainer's final-eval seed: every selected checkpoint is scored with the same random
        # numbers, and at the final step with num_samples equal to evaluation.num_samples this
        # reproduces summary.json's final_pass1 exactly (with fewer samples it is another protocol)
        seed=final_eval_seed(cfg.seed),
    )
    choice["eval"] = breakdown(records, family_weights(task), pass_k=sorted({1, num_samples}))
    return choice


def load_weights(run_dir: str, step: int, device: str = "cpu"):
    """(model, tokenizer) of ``run_dir`` at ``step``: the run's architecture and tokenizer, that step's weights."""
    path = weights_for_step(run_dir, step)
    model, tok = load_model_and_tokenizer(RunFolder(run_dir).cold_start)
    missing, unexpected = load_model(model, path, device=device)
    if missing or unexpected:
        raise ValueError(f"{path} does not match the run's model: missing {missing}, unexpected {unexpected}")
    return model.to(device).eval(), tok
