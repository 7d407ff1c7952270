"""Training a policy: the model and tokenizer, the cold start, rollouts, evaluation, the
minibatch update, the metrics row and the trainer loop. What a run writes to disk lives in
``sapo_lab.runs``; this layer builds on it and on ``sapo_lab.objective`` and ``sapo_lab.tasks``."""
