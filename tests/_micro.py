"""A micro configuration for fast end-to-end tests of the training stack."""

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


def micro(**extra):
    from sapo_lab.training.config import load_config

    return load_config("cpu-tiny", {**MICRO, **extra})
