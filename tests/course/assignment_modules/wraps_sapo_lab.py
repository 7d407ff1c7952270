"""A correct assignment module that wraps sapo_lab's public API (the grader must give it full marks)."""

import torch

import sapo_lab


def group_advantages(rewards, eps=1e-6):
    return sapo_lab.group_advantages(rewards, eps)


def masked_mean(values, mask, aggregation="per_response"):
    m = mask.to(values.dtype)
    if aggregation == "token_pool":
        return (values * m).sum() / m.sum()
    return ((values * m).sum(-1) / m.sum(-1)).mean()


def clipped_surrogate_loss(logp, behavior_logp, advantages, mask, eps=0.2):
    return sapo_lab.policy_loss(logp, behavior_logp, advantages, mask, loss_type="grpo",
                                clip_eps_low=eps, clip_eps_high=eps).loss


def sapo_gate(ratio, tau):
    return (4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0))


def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
    # policy_loss's value is the centred surrogate; add back the constant 2/tau the paper's f carries
    out = sapo_lab.policy_loss(logp, behavior_logp, advantages, mask, loss_type="sapo",
                               tau_pos=tau_pos, tau_neg=tau_neg)
    taus = torch.tensor([tau_pos, tau_neg], dtype=logp.dtype)  # Python numbers alone would make float32 taus
    tau = torch.where(advantages > 0, taus[0], taus[1])[:, None].expand_as(logp)
    return out.loss + masked_mean(-advantages[:, None] * (2.0 / tau), mask)


def gspo_sequence_ratio(logp, behavior_logp, mask):
    m = mask.to(logp.dtype)
    return torch.exp(((logp - behavior_logp.detach()) * m).sum(-1) / m.sum(-1))


def update_loss(logp, behavior_logp, rewards, mask, tau_pos=1.0, tau_neg=1.05):
    return sapo_loss(logp, behavior_logp, group_advantages(rewards).reshape(-1), mask, tau_pos, tau_neg)
