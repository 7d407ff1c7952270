"""Chapter 2's coded exercises: a response's log-probability, and the score of a softmax policy."""

from __future__ import annotations

import torch

from ..checks import Exercise
from ..mistakes import Mistake


# ---- 02.response_logprob: logits (B, T, V), tokens (B, T), mask (B, T) -> (B,) -------------------------------
def _gathered(per_vocab, tokens):
    return per_vocab.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def response_logprob(logits, tokens, mask):
    """log pi(y_i | q) = sum_t m_{i,t} log softmax(logits_{i,t})[y_{i,t}]: the log of the product rule."""
    return (_gathered(torch.log_softmax(logits, dim=-1), tokens) * mask).sum(dim=-1)


def _response_logprob_cases() -> list[dict]:
    """Right-padded batches whose padding holds real token ids (their log-probabilities are finite, so a
    missing mask shows); a response of one token, a full-length one, two tokens in the vocabulary, and
    logits spread wide enough that a sampled token can be very unlikely."""
    gen = torch.Generator().manual_seed(2202)

    def batch(lengths, width, vocab, scale):
        logits = torch.randn(len(lengths), width, vocab, generator=gen, dtype=torch.float64) * scale
        tokens = torch.randint(0, vocab, (len(lengths), width), generator=gen)
        mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).to(torch.float64)
        return dict(logits=logits, tokens=tokens, mask=mask)

    return [batch([3, 5, 1], 5, 4, 1.0), batch([2, 2], 4, 2, 3.0), batch([6, 4, 2, 5], 6, 7, 8.0)]


def _per_token(logits, tokens):
    return _gathered(torch.log_softmax(logits, dim=-1), tokens)


RESPONSE_LOGPROB_MISTAKES = (
    Mistake("the mask left out: the padding tokens' log-probabilities are summed in",
            "multiply the per-token log-probabilities by the mask before the sum over t",
            lambda logits, tokens, mask: _per_token(logits, tokens).sum(dim=-1)),
    Mistake("the mean over the response's tokens instead of the sum",
            "log pi(y | q) is the SUM of the token log-probabilities (the log of a product); do not divide by "
            "the length",
            lambda logits, tokens, mask: (_per_token(logits, tokens) * mask).sum(dim=-1) / mask.sum(dim=-1)),
    Mistake("the raw logits gathered: unnormalized scores, not log-probabilities",
            "normalize first: torch.log_softmax(logits, dim=-1), then gather the sampled tokens",
            lambda logits, tokens, mask: (_gathered(logits, tokens) * mask).sum(dim=-1)),
    Mistake("log_softmax over the positions (dim=1) instead of over the vocabulary",
            "the distribution at each position is over the V tokens: log_softmax(logits, dim=-1)",
            lambda logits, tokens, mask: (_gathered(torch.log_softmax(logits, dim=1), tokens) * mask).sum(dim=-1)),
)


# ---- 02.softmax_score: logits (N, K), actions (N,) -> (N, K) ------------------------------------------------
def score_by_autograd(logits, actions):
    """Row n: the gradient of log softmax(logits_n)[a_n] with respect to logits_n, taken by autograd."""
    x = logits.detach().clone().requires_grad_(True)
    chosen = torch.log_softmax(x, dim=-1).gather(-1, actions.unsqueeze(-1)).sum()
    (grad,) = torch.autograd.grad(chosen, x)
    return grad


def _one_hot(logits, actions):
    return torch.nn.functional.one_hot(actions, logits.shape[-1]).to(logits.dtype)


def _softmax_score_cases() -> list[dict]:
    """Two actions, five actions with every action sampled, and a near-deterministic policy (logits ten apart)
    where the sampled action is both the likeliest and a very unlikely one."""
    gen = torch.Generator().manual_seed(2203)
    two = dict(logits=torch.randn(3, 2, generator=gen, dtype=torch.float64), actions=torch.tensor([0, 1, 1]))
    five = dict(logits=torch.randn(5, 5, generator=gen, dtype=torch.float64) * 2,
                actions=torch.tensor([4, 0, 2, 1, 3]))
    sharp = torch.tensor([[10.0, 0.0, -2.0], [10.0, 0.0, -2.0], [0.5, -0.5, 0.0]], dtype=torch.float64)
    return [two, five, dict(logits=sharp, actions=torch.tensor([0, 2, 1]))]


SOFTMAX_SCORE_MISTAKES = (
    Mistake("p - e_a: the sign is flipped (the gradient of -log pi)",
            "the score is e_a - p: the sampled action's logit goes up, every other logit goes down",
            lambda logits, actions: torch.softmax(logits, -1) - _one_hot(logits, actions)),
    Mistake("the one-hot e_a alone: the probabilities were not subtracted",
            "log pi(a) = theta_a - logsumexp(theta); the logsumexp term contributes -p, so the score is e_a - p",
            lambda logits, actions: _one_hot(logits, actions)),
    Mistake("the gradient of pi(a) instead of log pi(a): pi(a) (e_a - p)",
            "the score is the gradient of the LOG-probability, grad pi / pi: divide by pi(a), leaving e_a - p",
            lambda logits, actions: torch.softmax(logits, -1).gather(-1, actions.unsqueeze(-1))
            * (_one_hot(logits, actions) - torch.softmax(logits, -1))),
    Mistake("only the sampled action's entry 1 - p_a kept, the other entries left at zero",
            "every logit moves: entry j is 1[j = a] - p_j, so the other entries are -p_j",
            lambda logits, actions: _one_hot(logits, actions) * (1 - torch.softmax(logits, -1))),
)


EXERCISES = [
    Exercise(id="02.response_logprob", function="response_logprob", reference=response_logprob,
             cases=_response_logprob_cases, mistakes=RESPONSE_LOGPROB_MISTAKES, grad_wrt=("logits",)),
    Exercise(id="02.softmax_score", function="softmax_score", reference=score_by_autograd,
             cases=_softmax_score_cases, mistakes=SOFTMAX_SCORE_MISTAKES),
]
