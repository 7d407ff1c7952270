"""The grading side of the stand-ins: the handout's functions computed here, for a student's process that calls them.

When part X is graded, the functions X may call are replaced in the student's module by stand-ins
(``sandbox.py``'s :func:`remote_functions`) that send their arguments here and receive the answer of
``substitutes.py``'s plain-torch function, and, when the student's result is differentiated, the gradient with
respect to each tensor argument. The student's process holds no line of the answers' code, so none of it can be
copied out of a report; it can only ask for answers on inputs of its own, which is what a stand-in is for.

Wire format, both ways: one JSON header line, then the header's tensors as raw float64 bytes in its ``shapes``.
A request is ``{"op": "call", "name", "args", "kwargs", "shapes"}`` (a tensor argument written ``{"tensor": i}``)
or ``{"op": "backward", "id", "shapes"}`` (the gradient of call ``id``'s result); a reply is ``{"id", "shapes"}``
(the result), ``{"grads": [true/false, ...], "shapes"}`` (a gradient per tensor argument, false where none flows) or
``{"error": "..."}``. Every request is checked before anything is computed: it comes from the student's process.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict

from .sandbox import _read_tensors, _reply  # the harness's framing: a JSON header line, then raw tensor bytes

MAX_HEADER = 64 * 1024
MAX_ELEMENTS = 2**22  # of one request's tensors together (32 MiB of float64)
MAX_KEPT = 4096  # calls whose graph is kept for a backward request; older ones are forgotten
MAX_ARGS = 8
MAX_DIMS = 4


class BadRequest(Exception):
    """A request the stand-ins do not accept (its words are the reply's error)."""


def _scalar(value, where: str):
    if value is None or isinstance(value, bool) or (isinstance(value, (int, float)) and math.isfinite(value)):
        return value
    if isinstance(value, str) and len(value) <= 32:
        return value
    raise BadRequest(f"{where} is not a number, a short text, True/False or None")


def _shapes(head: dict) -> list[list[int]]:
    shapes = head.get("shapes")
    if not isinstance(shapes, list) or len(shapes) > MAX_ARGS:
        raise BadRequest("shapes is not a list of at most 8 shapes")
    total = 0
    for shape in shapes:
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(type(n) is int and 0 <= n <= MAX_ELEMENTS for n in shape)):
            raise BadRequest("a shape is not a list of at most 4 sizes")
        total += math.prod(shape)
    if total > MAX_ELEMENTS:
        raise BadRequest(f"the tensors hold more than {MAX_ELEMENTS} numbers")
    return shapes


def _resolve(value, tensors: list, where: str):
    """An argument as the stand-in receives it: ``{"tensor": i}`` is the request's i-th tensor."""
    if isinstance(value, dict):
        i = value.get("tensor")
        if set(value) != {"tensor"} or type(i) is not int or not 0 <= i < len(tensors):
            raise BadRequest(f"{where} is an object that names no tensor of the request")
        return tensors[i]
    return _scalar(value, where)


class StandInServer:
    """Answers one student process's stand-in requests on a thread of its own, until the process closes its end.

    ``functions``: name -> the trusted function (``substitutes.py``'s) a stand-in of that name computes."""

    def __init__(self, functions: dict):
        self.functions = functions
        self._request_read, self.request_write = os.pipe()  # the child writes requests on request_write
        self.reply_read, self._reply_write = os.pipe()  # and reads replies from reply_read
        self._kept: OrderedDict = OrderedDict()
        self._next_id = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def child_fds(self) -> tuple[int, int]:
        return self.request_write, self.reply_read

    def start(self) -> None:
        """Start answering; the child's ends are closed here (the child holds its own copies)."""
        os.close(self.request_write)
        os.close(self.reply_read)
        self._thread.start()

    def join(self) -> None:
        self._thread.join(timeout=5)

    # ---- one request ---------------------------------------------------------------------------------------
    def _serve(self) -> None:
        import torch

        torch.set_num_threads(1)
        with os.fdopen(self._request_read, "rb") as requests, os.fdopen(self._reply_write, "wb") as replies:
            try:
                while line := requests.readline(MAX_HEADER + 1):
                    _reply(replies, *self._answer(line, requests))
            except (BrokenPipeError, EOFError, OSError):
                pass  # the student's process ended or sent a request cut short: nothing to answer

    def _answer(self, line: bytes, stream) -> tuple[dict, bytes]:
        try:
            if len(line) > MAX_HEADER or not line.endswith(b"\n"):
                raise BadRequest("a request header longer than 64 KiB")
            try:
                head = json.loads(line)
            except ValueError:
                raise BadRequest("a request that is not JSON") from None
            if not isinstance(head, dict):
                raise BadRequest("a request that is not an object")
            tensors = _read_tensors(stream, {"dtype": "float64", "shapes": _shapes(head)})
            if head.get("op") == "call":
                return self._call(head, tensors)
            if head.get("op") == "backward":
                return self._backward(head, tensors)
            raise BadRequest("op is neither call nor backward")
        except BadRequest as exc:
            return {"error": f"the grader's stand-in refuses this request: {exc}"}, b""
        except EOFError:
            raise
        except Exception as exc:  # noqa: BLE001 - a stand-in's own error on the student's arguments is the reply
            text = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            return {"error": text}, b""

    def _call(self, head: dict, tensors: list) -> tuple[dict, bytes]:
        import torch

        name = head.get("name")
        if name not in self.functions:
            raise BadRequest(f"no stand-in named {str(name)[:40]!r}")
        args, kwargs = head.get("args", []), head.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict) or len(args) + len(kwargs) > MAX_ARGS:
            raise BadRequest("args is not a list or kwargs not an object (at most 8 arguments)")
        if not all(isinstance(k, str) and k.isidentifier() for k in kwargs):
            raise BadRequest("a keyword that is not a name")
        leaves = [t.clone().requires_grad_(True) for t in tensors]
        call_args = [_resolve(a, leaves, f"argument {i + 1}") for i, a in enumerate(args)]
        call_kwargs = {k: _resolve(v, leaves, k) for k, v in kwargs.items()}
        out = self.functions[name](*call_args, **call_kwargs)
        if not torch.is_tensor(out):
            raise BadRequest(f"{name} returned no tensor")
        self._next_id += 1
        self._kept[self._next_id] = (leaves, out)
        if len(self._kept) > MAX_KEPT:
            self._kept.popitem(last=False)
        value = out.detach().to(torch.float64).contiguous()
        return {"id": self._next_id, "shapes": [list(value.shape)]}, value.numpy().tobytes()

    def _backward(self, head: dict, tensors: list) -> tuple[dict, bytes]:
        import torch

        kept = self._kept.get(head.get("id")) if type(head.get("id")) is int else None
        if kept is None:
            raise BadRequest("a backward request for a call not made (or long forgotten)")
        leaves, out = kept
        if len(tensors) != 1 or list(tensors[0].shape) != list(out.shape):
            raise BadRequest("a backward request whose gradient is not of the result's shape")
        if not out.requires_grad:
            grads = [None] * len(leaves)
        else:
            grads = torch.autograd.grad(out, leaves, tensors[0], retain_graph=True, allow_unused=True)
        flows = [g is not None for g in grads]
        sent = [g.detach().contiguous() for g in grads if g is not None]
        return ({"grads": flows, "shapes": [list(g.shape) for g in sent]},
                b"".join(g.numpy().tobytes() for g in sent))
