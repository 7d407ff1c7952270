"""What a run and a study leave on disk: the config tree, the run folder and its file names,
the resume policy, durable (atomic, fsynced) writes and manifests, checkpoints, and the
metric names. Builds on ``sapo_lab.objective`` and ``sapo_lab.tasks``; the trainer
(``sapo_lab.training``) and the studies build on it."""
