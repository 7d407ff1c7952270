"""Chapter 9's coded exercise: the vector error between the token- and the sequence-level SAPO updates of one
response, checked against the gradients of the package's loss."""

from __future__ import annotations

import torch

from ...objective.gates import gate_weight, update_coefficient
from ...objective.losses import policy_loss
from ..checks import Exercise
from ..mistakes import Mistake


# ---- 09.vector_error: vector_error(z, H, tau) -> (D,) -----------------------------------------------------------
def vector_error_of_package(z, H, tau):
    """The reference: one response whose log-probabilities are linear in a parameter theta (score vectors H,
    log ratios z at theta = 0) and a positive advantage of 1, so that tau_pos = tau; the gradient of the
    sequence-level loss minus that of the token-level loss is (1/T) sum_t c(r_t) h_t - c(s) h_bar."""
    z = z.detach().to(torch.float64)
    H = H.detach().to(torch.float64)
    theta = torch.zeros(H.shape[1], dtype=torch.float64, requires_grad=True)
    behavior = torch.full_like(z, -2.0)
    logp = (behavior + z + H @ theta)[None, :]
    grads = {}
    for level in ("token", "sequence"):
        out = policy_loss(logp, behavior[None, :], torch.ones(1, dtype=torch.float64), torch.ones_like(logp),
                          tau_pos=tau, importance_sampling_level=level, compute_stats=False)
        (grads[level],) = torch.autograd.grad(out.loss, theta, retain_graph=True)
    return grads["sequence"] - grads["token"]


def _vector_error(z, H, tau, *, weights="coefficient", sequence="geometric", mean=True, sign=1.0):
    if weights == "coefficient":
        c, c_seq_of = update_coefficient(torch.exp(z), tau), lambda s: update_coefficient(s, tau)
    elif weights == "gate":
        c, c_seq_of = gate_weight(torch.exp(z), tau), lambda s: gate_weight(s, tau)
    else:  # Chapter 8's approximate gates g(z) = w(1 + z), at the sequence statistic mu
        c, c_seq_of = gate_weight(1.0 + z, tau), lambda s: gate_weight(1.0 + torch.log(s), tau)
    s = torch.exp(z.mean()) if sequence == "geometric" else torch.exp(z).mean()
    token = (c[:, None] * H).mean(0) if mean else (c[:, None] * H).sum(0)
    return sign * (token - c_seq_of(s) * H.mean(0))


def _vector_cases() -> list[dict]:
    """A symmetric two-token pair (the sequence ratio is exactly 1), a generic response, a long one with a wide
    spread and a sharp temperature, and T = 1 (no error at all)."""
    gen = torch.Generator().manual_seed(909)
    pair = dict(z=torch.tensor([-0.25, 0.25], dtype=torch.float64),
                H=torch.tensor([[2.0], [-1.0]], dtype=torch.float64), tau=1.0)
    generic = dict(z=0.3 * torch.randn(5, generator=gen, dtype=torch.float64) + 0.1,
                   H=torch.randn(5, 3, generator=gen, dtype=torch.float64), tau=1.05)
    wide = dict(z=0.8 * torch.randn(12, generator=gen, dtype=torch.float64),
                H=2.0 * torch.randn(12, 4, generator=gen, dtype=torch.float64), tau=2.5)
    single = dict(z=torch.tensor([0.4], dtype=torch.float64), H=torch.tensor([[1.5, -0.5]], dtype=torch.float64),
                  tau=0.7)
    return [pair, generic, wide, single]


VECTOR_ERROR = (
    Mistake("the gates w_tau(r_t) used instead of the coefficients c_tau(r_t) = r_t w_tau(r_t)",
            "the parameters see r_t w_tau(r_t) h_t: multiply each gate by its ratio, and use c_tau(s) for the "
            "sequence",
            lambda **kw: _vector_error(**kw, weights="gate")),
    Mistake("Chapter 8's approximate gates g_tau(z_t) = sech^2(tau z_t / 2) used instead of the exact coefficients",
            "the loss differentiates the exact coefficients c_tau(r_t) = r_t w_tau(r_t) with r_t = e^(z_t)",
            lambda **kw: _vector_error(**kw, weights="approximate")),
    Mistake("the sequence ratio taken as the arithmetic mean of the ratios instead of s = exp(mean z)",
            "s is the geometric mean: torch.exp(z.mean())",
            lambda **kw: _vector_error(**kw, sequence="arithmetic")),
    Mistake("the sum over tokens instead of the mean (1/T left out of the token-level update)",
            "the token-level update is (1/T) sum_t c_t h_t: take the mean over tokens",
            lambda **kw: _vector_error(**kw, mean=False)),
    Mistake("the sequence-level update minus the token-level one (the sign is flipped)",
            "return (1/T) sum_t c_t h_t - c(s) h_bar: token level first",
            lambda **kw: _vector_error(**kw, sign=-1.0)),
)


EXERCISES = [
    Exercise(id="09.vector_error", function="vector_error", reference=vector_error_of_package, cases=_vector_cases,
             mistakes=VECTOR_ERROR),
]
