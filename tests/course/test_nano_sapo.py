"""nano_sapo.py, the one-file SAPO trainer: its loss and its update are the library's, and it is short.

The loss and the parameter gradients are compared with ``sapo_lab.policy_loss`` (an independent implementation,
the one the book audits) through the same tiny GPT-2, for both aggregations and both signs of the advantage.
Catches a temperature picked by the ratio's side, a missing 4/tau, an undetached behaviour log-prob, a mean that
counts padding, and a log-prob taken from the wrong logit column (off by one).
"""

from __future__ import annotations

import ast
import inspect

import pytest
import torch

from sapo_lab import policy_loss
from sapo_lab.course import nano_sapo
from sapo_lab.training.model import build_model, response_logprobs


def _rows(n=6, answer_len=4, seed=3):
    """Prompt + answer rows with some answers ending early (EOS then padding), like sampled ones."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, 15, (n, 6), generator=gen)
    answer = torch.randint(3, 15, (n, answer_len), generator=gen)
    lengths = torch.tensor([4, 1, 3, 4, 2, 4])[:n]
    mask = (torch.arange(answer_len)[None, :] < lengths[:, None]).float()
    answer[torch.arange(n), lengths - 1] = nano_sapo.EOS
    answer = torch.where(mask.bool(), answer, torch.full_like(answer, nano_sapo.PAD))
    ids = torch.cat([prompt, answer], 1)
    attention = torch.cat([torch.ones_like(prompt), mask.long()], 1)
    return ids, attention, mask


def test_token_logprobs_are_the_librarys_teacher_forced_logprobs():
    """Catches an off-by-one logit column: the logits at t predict token t + 1."""
    model = build_model("cpu-micro", seed=0)
    ids, attention, mask = _rows()
    ours = nano_sapo.token_logprobs(model, ids, attention, 4) * mask
    response = torch.cat([torch.zeros(6, 6), mask], 1)
    theirs = response_logprobs(model, ids, attention, response)
    assert torch.allclose(ours, theirs, atol=1e-6)


@pytest.mark.parametrize("aggregation", ["per_response", "token_pool"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_loss_and_parameter_gradients_equal_policy_loss(aggregation, sign):
    torch.manual_seed(0)
    model = build_model("cpu-micro", seed=1).double()
    ids, attention, mask = _rows()
    with torch.no_grad():
        old = nano_sapo.token_logprobs(model, ids, attention, 4).double()
    old = old + 0.3 * torch.randn_like(old)  # a stale behaviour policy: ratios away from 1 on both sides
    adv = sign * torch.tensor([1.2, -0.7, 0.4, -1.5, 0.9, -0.2], dtype=torch.float64)
    grads = []
    for loss_of in (
        lambda lp: nano_sapo.sapo_loss(lp, old, adv, mask.double(), 1.0, 1.05, aggregation),
        lambda lp: policy_loss(lp, old, adv, mask.double(), loss_type="sapo", tau_pos=1.0, tau_neg=1.05,
                               aggregation=aggregation, compute_stats=False).loss,
    ):
        model.zero_grad()
        loss = loss_of(nano_sapo.token_logprobs(model, ids, attention, 4))
        loss.backward()
        grads.append((loss.item(), torch.cat([p.grad.reshape(-1) for p in model.parameters()])))
    (mine, g_mine), (lib, g_lib) = grads
    assert mine == pytest.approx(lib, rel=1e-12, abs=1e-14)
    assert torch.allclose(g_mine, g_lib, rtol=1e-9, atol=1e-13)
    assert g_lib.abs().max() > 0  # the comparison is not between two zero gradients


def test_grpo_loss_is_the_librarys_grpo():
    """Switching one function gives GRPO: the clipped loss equals the library's grpo kernel."""
    gen = torch.Generator().manual_seed(5)
    logp = (-1 + 0.5 * torch.randn(5, 4, generator=gen, dtype=torch.float64)).requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(5, 4, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.3, 2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float64)
    ours = nano_sapo.grpo_loss(logp, old, adv, mask)
    theirs = policy_loss(logp, old, adv, mask, loss_type="grpo", compute_stats=False).loss
    g1, = torch.autograd.grad(ours, logp)
    g2, = torch.autograd.grad(theirs, logp)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    assert torch.allclose(g1, g2, rtol=1e-12, atol=1e-15)


def test_group_advantages_use_the_population_std():
    rewards = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    expected = torch.tensor([[-1.0, 1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0]])  # (0,1,1,0): mean 1/2, std 1/2
    assert torch.allclose(nano_sapo.group_advantages(rewards, eps=0.0 + 1e-12), expected, atol=1e-9)


def test_the_reward_needs_the_exact_answer_then_the_end_token():
    class P:
        answer = "580"
    ok = nano_sapo.encode("580") + [nano_sapo.EOS]
    assert nano_sapo.reward(ok, P) == 1.0
    assert nano_sapo.reward(nano_sapo.encode("580") + [nano_sapo.TOKEN["1"]], P) == 0.0  # no end token
    assert nano_sapo.reward(nano_sapo.encode("58") + [nano_sapo.EOS, 0], P) == 0.0


def test_it_stays_one_short_file_without_the_librarys_loss_or_trainer():
    """At most 250 non-blank lines; imports torch, the standard library and only the model's shape and the
    addition problems from sapo_lab."""
    source = inspect.getsource(nano_sapo)
    assert sum(1 for line in source.splitlines() if line.strip()) <= 250
    imported = {node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)}
    assert {m for m in imported if m and m.startswith("sapo_lab")} <= {"sapo_lab.tasks.addition",
                                                                       "sapo_lab.training.model"}


def test_the_help_says_what_each_flag_does_and_its_default(capsys):
    # catches a flag listed bare ("--steps STEPS" with no words), or its default left out, so that a reader cannot
    # tell how long the run is or what --loss swaps; the defaults are the Settings fields', typed here
    with pytest.raises(SystemExit):
        nano_sapo.main(["--help"])
    text = " ".join(capsys.readouterr().out.split("options:", 1)[1].split())
    for flag, default in (("--loss {sapo,grpo}", "sapo"), ("--steps STEPS", "150"), ("--seed SEED", "0")):
        described = text.split(flag, 1)[1].split(" --", 1)[0]
        assert f"(default: {default})" in described and len(described.split()) > 3, (flag, described)
