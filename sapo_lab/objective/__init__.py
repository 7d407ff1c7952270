"""The objective: SAPO's gate, GRPO's clip, GSPO's sequence ratio, the ablation kernels,
masks and aggregation, group advantages, the policy loss, its diagnostics and the audit.
Pure torch: imports nothing of sapo_lab outside this package except ``sapo_lab.errors``."""
