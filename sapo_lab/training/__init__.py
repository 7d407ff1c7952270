"""Training a policy: config, model and tokenizer, run folder, cold start, rollouts,
evaluation, the minibatch update, metrics and the trainer loop. Builds on
``sapo_lab.objective`` and ``sapo_lab.tasks`` and on nothing above them."""
