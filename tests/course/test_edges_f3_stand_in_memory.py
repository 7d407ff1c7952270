"""The stand-ins' memory of past calls at its limit, and the sandbox's /proc rule at its shortest path.

Both are boundaries no grading run reaches: a grading process makes far fewer than MAX_KEPT stand-in calls, and
the escapes the other tests try open paths below /proc/<pid>, never /proc/<pid> itself.
"""

import os

import pytest
import torch

from sapo_lab.course import sandbox, stand_ins
from sapo_lab.course.stand_ins import BadRequest, StandInServer

NOT_OURS = "4194305"  # one above Linux's largest pid_max: never this process's pid


@pytest.fixture
def server(monkeypatch):
    """A server that keeps the graphs of two calls; its pipes are closed afterwards (never started)."""
    monkeypatch.setattr(stand_ins, "MAX_KEPT", 2)
    s = StandInServer({"double": lambda x: 2.0 * x})
    yield s
    for fd in (s._request_read, s.request_write, s.reply_read, s._reply_write):
        os.close(fd)


def _call(server):
    x = torch.tensor([1.0, -3.0], dtype=torch.float64)
    return server._call({"name": "double", "args": [{"tensor": 0}]}, [x])[0]["id"]


def test_past_the_limit_the_oldest_call_is_forgotten_and_the_newest_still_answers(server):
    """catches: the oldest-first eviction turned around (``popitem()`` without ``last=False``), which forgets the
    call just made, so the student's backward for it is refused as 'long forgotten'."""
    ids = [_call(server) for _ in range(3)]
    assert ids == [1, 2, 3]
    assert list(server._kept) == [2, 3]  # a limit of 2: call 1, the oldest, is gone
    head, payload = server._backward({"id": 3}, [torch.ones(2, dtype=torch.float64)])
    # d(sum(2 x))/dx = 2 for each element, sent as two float64 numbers
    assert head["grads"] == [True]
    assert torch.frombuffer(bytearray(payload), dtype=torch.float64).tolist() == [2.0, 2.0]
    with pytest.raises(BadRequest, match="long forgotten"):
        server._backward({"id": 1}, [torch.ones(2, dtype=torch.float64)])


def _guard():
    return sandbox.Guard([], [], refuse_package=False, here=sandbox.__file__)


@pytest.mark.parametrize(("path", "refused"), [
    ("/proc", False),                     # two parts: the listing of pids is not a process's entries
    (f"/proc/{NOT_OURS}", True),          # three parts: another process's folder itself
    (f"/proc/{NOT_OURS}/status", True),   # four parts: an entry inside it
    ("/proc/self/status", False),         # this process's own entries stay readable
])
def test_another_process_folder_is_refused_from_its_shortest_path(path, refused):
    """catches: the /proc rule applied only below /proc/<pid> (``len(parts) > 3``), which lets a module list
    another process's folder (the grader's) with os.listdir."""
    guard = _guard()
    if refused:
        with pytest.raises(PermissionError):
            guard("os.listdir", (path,))
        assert guard.refused.startswith(f"opens {path} (another process's entries")
    else:
        guard("os.listdir", (path,))
        assert guard.refused is None
