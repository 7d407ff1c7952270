"""The stand-ins: the handout's functions, computed by the grading process for a student's process that calls them.

A part that calls the student's other functions is graded with the handout's answers in their place, so one bug
costs one part. Those answers must not be code in the student's process: an outside trial copied them out of it
through the report and scored 85/85 implementing nothing. Here: a stand-in's value and gradient equal the plain
function's (catches a stand-in that drops the gradient, or sends a tensor in the wrong order or dtype); a request
the grading process does not accept gets one line back and the server goes on (catches a student's process
crashing the grader's thread); a module that searches its whole process for the answers' code finds none.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch

from sapo_lab.course import grader, substitutes
from sapo_lab.course.sandbox import remote_functions
from sapo_lab.course.stand_ins import StandInServer

SEED = 20261206


@pytest.fixture
def stand_ins():
    """Stand-ins for every substitute, answered by a server on a thread of this process (as the grader runs one
    per student process); the child's ends are used here directly."""
    names = ("group_advantages", "masked_mean", "sapo_gate", "gspo_sequence_ratio", "clipped_surrogate_loss",
             "sapo_loss")
    server = StandInServer({n: getattr(substitutes, n) for n in names})
    request_write, reply_read = os.dup(server.request_write), os.dup(server.reply_read)
    server.start()
    yield remote_functions(names, (request_write, reply_read)), server


def batch():
    gen = torch.Generator().manual_seed(5)
    logp = (-2.0 * torch.rand(3, 5, generator=gen, dtype=torch.float64)).requires_grad_(True)
    behavior = logp.detach() + 0.3 * torch.randn(3, 5, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float64)
    return logp, behavior, mask, torch.tensor([0.9, -1.2, 0.4], dtype=torch.float64)


def test_a_composite_built_on_stand_ins_has_the_plain_functions_value_and_gradient(stand_ins):
    remote, _ = stand_ins
    logp, behavior, mask, adv = batch()

    def composite(masked_mean, sapo_gate):  # a student's sapo_loss, written on top of the two functions
        ratio = torch.exp(logp - behavior)
        tau = torch.where(adv[:, None] > 0, torch.full_like(logp, 1.0), torch.full_like(logp, 1.05))
        return masked_mean(-adv[:, None] * sapo_gate(ratio, tau), mask, aggregation="token_pool")

    here = composite(substitutes.masked_mean, substitutes.sapo_gate)
    there = composite(remote["masked_mean"], remote["sapo_gate"])
    assert there.dtype == torch.float64 and there.shape == ()
    assert torch.equal(there.detach(), here.detach())
    (g_here,) = torch.autograd.grad(here, logp)
    (g_there,) = torch.autograd.grad(there, logp)
    torch.testing.assert_close(g_there, g_here, rtol=1e-14, atol=1e-16)
    # a float32 argument gives a float32 answer, as the plain function would
    assert remote["sapo_gate"](torch.ones(2, dtype=torch.float32), 2.0).dtype == torch.float32
    # no gradient where the plain function detaches: sapo_loss's behavior_logp
    behavior_leaf = behavior.clone().requires_grad_(True)
    loss = remote["sapo_loss"](logp, behavior_leaf, adv, mask, 1.0, 1.05)
    grads = torch.autograd.grad(loss, [logp, behavior_leaf], allow_unused=True)
    assert grads[0] is not None and grads[1] is None


def raw_request(server_fds, head: bytes, payload: bytes = b"") -> dict:
    request_write, reply_read = server_fds
    os.write(request_write, head + b"\n" + payload)
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(reply_read, 1)
    return json.loads(line)


@pytest.mark.parametrize("head, says", [
    (b"not json", "not JSON"),
    (b'["a list"]', "not an object"),
    (b'{"op": "call", "name": "sapo_lab", "shapes": []}', "no stand-in named"),
    (b'{"op": "call", "name": "sapo_gate", "shapes": [[1, 1, 1, 1, 1]]}', "a shape is not"),
    (b'{"op": "call", "name": "sapo_gate", "shapes": [[3000, 3000]]}', "more than"),
    (b'{"op": "call", "name": "sapo_gate", "args": [{"tensor": 4}, 1.0], "shapes": []}', "names no tensor"),
    (b'{"op": "call", "name": "sapo_gate", "args": [[1, 2], 1.0], "shapes": []}', "not a number"),
    (b'{"op": "backward", "id": 999, "shapes": [[1]]}', "a call not made"),
    (b'{"op": "exec", "shapes": []}', "neither call nor backward"),
])
def test_a_request_the_grader_does_not_accept_gets_one_line_and_the_server_goes_on(head, says):
    server = StandInServer({"sapo_gate": substitutes.sapo_gate})
    fds = (os.dup(server.request_write), os.dup(server.reply_read))
    server.start()
    padding = 8 if b'"id": 999' in head else 0
    reply = raw_request(fds, head, b"\0" * padding)
    assert set(reply) == {"error"} and says in reply["error"], reply
    ok = raw_request(fds, b'{"op": "call", "name": "sapo_gate", "args": [{"tensor": 0}, 2.0], "shapes": [[1]]}',
                     torch.tensor([1.0], dtype=torch.float64).numpy().tobytes())
    assert set(ok) == {"id", "shapes"} and ok["shapes"] == [[1]]  # still answering
    os.close(fds[0])
    server.join()


SEARCHER = '''
    import sys, types, torch

    ANSWER_NAMES = {"sigmoid", "clamp", "sqrt"}  # what the handout's answers call; this module calls none of them

    def _codes(value, seen):
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, types.CodeType):
            yield value
            for c in value.co_consts:
                yield from _codes(c, seen)
        elif isinstance(value, types.FunctionType):
            yield from _codes(value.__code__, seen)
            for cell in value.__closure__ or ():
                try:
                    yield from _codes(cell.cell_contents, seen)
                except ValueError:
                    pass
        elif isinstance(value, type):
            for v in list(vars(value).values()):
                yield from _codes(getattr(v, "__func__", v), seen)
        elif isinstance(value, dict):
            for v in list(value.values()):
                yield from _codes(v, seen)

    def _search():
        seen, found = set(), set()
        frame = sys._getframe()
        while frame is not None:
            for space in (frame.f_locals, frame.f_globals):
                for code in _codes(space, seen):
                    found |= ANSWER_NAMES & set(code.co_names)
            frame = frame.f_back
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith(("torch", "numpy")):
                continue
            for code in _codes(vars(module), seen):
                found |= ANSWER_NAMES & set(code.co_names)
        return sorted(found)

    def group_advantages(rewards, eps=1e-6):
        raise NotImplementedError

    def masked_mean(values, mask, aggregation="per_response"):
        raise NotImplementedError

    def clipped_surrogate_loss(logp, behavior_logp, advantages, mask, eps=0.2):
        raise NotImplementedError

    def sapo_gate(ratio, tau):
        raise NotImplementedError

    def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
        raise RuntimeError("found " + (",".join(_search()) or "nothing"))

    def gspo_sequence_ratio(logp, behavior_logp, mask):
        raise NotImplementedError

    def update_loss(logp, behavior_logp, rewards, mask, tau_pos=1.0, tau_neg=1.05):
        raise RuntimeError("found " + (",".join(_search()) or "nothing"))
'''


def test_a_module_that_searches_its_process_finds_none_of_the_answers_code(tmp_path):
    # catches: the answers sent as source or code objects into the student's process (where the composite parts
    # are graded), whence a report's error text can carry them out
    module = tmp_path / "searcher.py"
    module.write_text(textwrap.dedent(SEARCHER))
    report = grader.grade(str(module), seed=SEED, parts=["sapo_loss", "update_loss"])
    for part in ("sapo_loss", "update_loss"):
        note = report.part(part).note
        assert "found nothing" in note, note
