"""The objective: SAPO's gate, GRPO's clip, GSPO's sequence ratio, the ablation kernels,
masks and aggregation, group advantages, the policy loss, its diagnostics and the audit.
Pure torch: imports nothing of sapo_lab outside this package except the shared leaves ``sapo_lab.errors``
and ``sapo_lab.half_width`` (the gate's half-width, which the torch-free evidence layer also reads)."""
