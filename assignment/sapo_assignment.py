"""SAPO assignment: implement the seven functions below with torch alone (no sapo_lab).

Grade it with ``python -m sapo_lab grade assignment/sapo_assignment.py`` (add ``--train`` for the last part).
The handout (book/assignment_sapo.md, "A graded SAPO assignment" in the book) states every definition.
Shapes: B responses, T tokens; ``mask`` is 0/1 (B, T) with 1 on response tokens; ``logp`` and
``behavior_logp`` are per-token log-probs of the sampled tokens under the current and the sampling policy;
``advantages`` has one value per response, shape (B,).

What the grader checks (the handout's list): every input is float64 and every result must be a float64 tensor;
masked_mean and the three losses return 0-d tensors; no gradient may reach ``behavior_logp`` wherever a ratio is
formed (parts 3, 5, 6 and 7); ratios up to about 1800 occur (use torch.sigmoid); while one part is graded the
others are replaced by correct ones, so call them by their names; importing sapo_lab in any form is refused.
"""

import torch  # noqa: F401  (you will need it)


def group_advantages(rewards, eps=1e-6):
    """rewards (P, G) -> advantages (P, G): (R - group mean) / (group population std + eps), the population std
    divided by G (not G - 1)."""
    raise NotImplementedError


def masked_mean(values, mask, aggregation="per_response"):
    """Average per-token ``values`` (B, T) over the tokens where ``mask`` is 1.

    "per_response": mean over each response's tokens (divided by its length), then mean over responses.
    "token_pool":   one mean over every response token of the batch.
    Returns a 0-d tensor.
    """
    raise NotImplementedError


def clipped_surrogate_loss(logp, behavior_logp, advantages, mask, eps=0.2):
    """GRPO's loss: -min(r A, clip(r, 1 - eps, 1 + eps) A) per token, r = exp(logp - behavior_logp),
    averaged per response then over responses. No gradient may reach ``behavior_logp``."""
    raise NotImplementedError


def sapo_gate(ratio, tau):
    """SAPO's soft gate f_tau(r) = (4 / tau) * sigmoid(tau * (r - 1)), elementwise."""
    raise NotImplementedError


def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
    """SAPO's loss: -A f_tau(r) per token with tau = tau_pos where A > 0 and tau_neg otherwise, averaged per
    response then over responses. No gradient may reach ``behavior_logp``."""
    raise NotImplementedError


def gspo_sequence_ratio(logp, behavior_logp, mask):
    """GSPO's sequence ratio, shape (B,): exp of the mean of (logp - behavior_logp) over each response's tokens.
    No gradient may reach ``behavior_logp``."""
    raise NotImplementedError


def update_loss(logp, behavior_logp, rewards, mask, tau_pos=1.0, tau_neg=1.05):
    """The SAPO loss of one update from a rollout batch: ``rewards`` (P, G) for P prompts with G responses
    each; row i of ``logp`` is response i % G of prompt i // G. Group-normalize, then sapo_loss."""
    raise NotImplementedError
