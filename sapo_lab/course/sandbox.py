"""The process that runs a student's code for the grader: ``python sandbox.py EVENTS_FD``, the request (JSON) on stdin.

It is started as a script, never imported as part of the package inside that process, so sapo_lab is not loaded
there; in a bubblewrap sandbox (``isolation.py``) it is the only file of the grader there, run with no site module
(REQUEST's ``site_dirs`` say where torch and numpy are). It imports torch, caps the address space (the hard limit
too), installs a seccomp filter that refuses new processes (:func:`_forbid_new_processes`), then an audit hook
that names in one line what a module tried: importing sapo_lab in any form, opening any file of the sapo_lab
package or the frozen outputs, writing files, starting processes, ... (where no sandbox could start, the hook is
the only guard). Then it imports the student's module and calls the requested parts on REQUEST's inputs, writing
one JSON line per event to the inherited pipe EVENTS_FD. It never sees the reference outputs and decides nothing:
the grading process checks every line it sends and compares. For the training part (REQUEST's ``serve``: two
inherited pipe descriptors) it instead answers the trainer's ``sapo_loss`` calls one by one (:func:`serve`): the
trainer and sapo_lab stay in ``train_child.py``'s process. ``sandbox.py --probe`` checks a sandbox from inside.

:func:`observe` (what is recorded of one call) is also used by the grading process and by
``assignment/make_expected.py``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys

AGGREGATIONS = ("per_response", "token_pool")
MAX_SENT = 100_000  # numbers of one returned tensor sent to the grader (student_messages.MAX_NUMBERS)
SPAWN_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                "pty.spawn")


def _values(x):
    """What is compared of a returned value: a number, nested lists of numbers, or the type's name."""
    import torch

    if torch.is_tensor(x):  # a tensor far larger than any answer is sent as its size (its shape says it is wrong)
        return x.detach().tolist() if x.numel() <= MAX_SENT else f"<a tensor of {x.numel()} elements>"
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    return f"<{type(x).__name__}>"


def _describe(x) -> dict:
    import torch

    if torch.is_tensor(x):
        return {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
    return {"type": type(x).__name__}


def _grad(t):
    import torch

    if t is None or not bool(torch.any(t != 0)):
        return None
    return t.tolist()


def _gradient(out, leaf):
    """The gradient of ``out`` (summed) with respect to ``leaf``; None where none flows."""
    import torch

    if not (torch.is_tensor(out) and out.requires_grad and out.numel()):
        return None
    return torch.autograd.grad(out.sum(), [leaf], allow_unused=True)[0]


def observe_with_meta(part: str, fn, kwargs: dict) -> tuple[dict, dict]:
    """Call ``fn`` as the grader calls the student's function: the outputs compared (values; for the losses and
    GSPO's ratio the gradients with respect to ``logp`` and ``behavior_logp``, for the gate the gradient with
    respect to the ratio, for the masked mean each aggregation's with respect to the values; None where none
    flows) and, for each returned value, its shape and dtype."""
    import torch

    kw = {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, list) else v for k, v in kwargs.items()}
    for k, v in list(kw.items()):
        if torch.is_tensor(v):
            kw[k] = v.detach().clone().to(torch.float64)
    given = {k: v.clone() for k, v in kw.items() if torch.is_tensor(v)}
    recorded, meta = _observe(part, fn, kw)
    for name, before in given.items():  # a trainer's batch, changed under it, would train on other numbers
        after = kw[name].detach()
        if after.shape != before.shape or not torch.equal(torch.nan_to_num(after), torch.nan_to_num(before)):
            raise ValueError(f"{part} changes its input {name} in place (the caller's tensor): work on a copy")
    return recorded, meta


def _observe(part: str, fn, kw: dict) -> tuple[dict, dict]:
    import torch

    if part == "group_advantages":
        out = fn(**kw)
        return {"value": _values(out)}, {"value": _describe(out)}
    if part == "sapo_gate":  # and the gradient with respect to the ratio, which the SAPO loss trains through
        kw["ratio"].requires_grad_(True)
        out = fn(**kw)
        return {"value": _values(out), "grad_ratio": _grad(_gradient(out, kw["ratio"]))}, {"value": _describe(out)}
    if part == "masked_mean":  # and each aggregation's gradient with respect to the values
        recorded, meta = {}, {}
        for agg in AGGREGATIONS:
            values = kw["values"].detach().clone().requires_grad_(True)
            out = fn(values, kw["mask"], aggregation=agg)
            recorded[agg], meta[agg] = _values(out), _describe(out)
            recorded[f"grad_{agg}"] = _grad(_gradient(out, values))
        default = _values(fn(kw["values"].detach().clone(), kw["mask"]))
        if default != recorded["per_response"]:  # the skeleton's default is per_response
            raise ValueError("masked_mean(values, mask), with no aggregation, does not return the per_response mean: "
                             "keep the skeleton's default aggregation=\"per_response\"")
        return recorded, meta
    kw["logp"].requires_grad_(True)
    kw["behavior_logp"].requires_grad_(True)
    out = fn(**kw)
    grads = (None, None)
    if torch.is_tensor(out) and out.requires_grad and out.numel():
        total = out.sum() if out.ndim else out
        grads = torch.autograd.grad(total, [kw["logp"], kw["behavior_logp"]], allow_unused=True)
    recorded = {"value": _values(out), "grad_logp": _grad(grads[0]), "grad_behavior_logp": _grad(grads[1])}
    return recorded, {"value": _describe(out)}


def observe(part: str, fn, kwargs: dict) -> dict:
    """The outputs :func:`observe_with_meta` records (what assignment/expected.json freezes)."""
    return observe_with_meta(part, fn, kwargs)[0]


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# Audit events refused outright: signals to any process (the grader's included), foreign code through ctypes
# (a C library's system() or open() would pass by every other check), sockets (a channel to another grading
# process), shared memory maps, and changes to the file system.
REFUSED_EVENTS = {
    "os.kill": "sends a signal", "os.killpg": "sends a signal", "signal.pthread_kill": "sends a signal",
    "socket.__new__": "opens a socket", "socket.connect": "opens a socket", "socket.bind": "opens a socket",
    "mmap.__new__": "maps a file into memory", "os.symlink": "changes files", "os.link": "changes files",
    "os.rename": "changes files", "os.remove": "changes files", "os.rmdir": "changes files",
    "os.mkdir": "changes files", "os.truncate": "changes files", "os.chmod": "changes files",
    "os.chown": "changes files", "os.utime": "changes files", "os.mkfifo": "changes files",
    "os.mknod": "changes files", "shutil.copyfile": "changes files", "shutil.rmtree": "changes files",
    "sqlite3.connect": "opens a database",
    # the guard itself is referenced by no frame of this file; only the collector's lists would lead to it
    "gc.get_objects": "inspects the grader's objects", "gc.get_referrers": "inspects the grader's objects",
    "gc.get_referents": "inspects the grader's objects",
}
# A refused call's traceback runs through the guard's own frames (and so to its settings): a traceback's frames
# are out of reach; frames on the stack (sys._getframe, for logging, enum and namedtuple) lead to none of them.
TRACEBACK_FRAME = "tb_frame"


def _plain_path(path) -> str | None:
    """``path`` as a plain str without running any of the module's code (a str or bytes subclass, or a
    path-like object of its own, could run code while the guard checks it); None for anything else."""
    if isinstance(path, str):
        return str.__str__(path)
    if isinstance(path, bytes):
        return os.fsdecode(bytes(memoryview(path)))
    if type(path).__module__ in ("pathlib", "posix") and type(path).__name__ in (
            "PosixPath", "PurePosixPath", "Path", "PurePath", "DirEntry"):
        return os.fspath(path)
    return None


class Guard:
    """The audit hook: refuses sapo_lab (unless allowed), the blocked files and folders (the package, the frozen
    outputs, every grading work folder), writing any file, /proc beyond the process's own entries, other
    processes' descriptors, signals, ctypes, sockets and new processes."""

    def __init__(self, blocked_dirs, blocked_files, refuse_package, here, blocked_prefixes=(), out=None,
                 refusals=None):
        self.blocked_dirs = [os.path.realpath(d) + os.sep for d in blocked_dirs]
        self.blocked_files = {os.path.realpath(f) for f in blocked_files}
        self.blocked_prefixes = [os.path.realpath(os.path.dirname(p)) + os.sep + os.path.basename(p)
                                 for p in blocked_prefixes]
        self.refuse_package = refuse_package
        self.here = here
        self.pid = str(os.getpid())
        self.refused = None
        self.out = out  # the first refusal is sent from here, before the module can touch anything
        self.refusals = [] if refusals is None else refusals

    def _where(self) -> str:
        """The innermost caller outside this file and importlib (frames only: reading source would open files)."""
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if name != self.here and not name.startswith("<frozen") and f"{os.sep}importlib{os.sep}" not in name:
                return f" ({os.path.basename(name)}, line {frame.f_lineno})"
            frame = frame.f_back
        return ""

    def _refuse(self, what: str, exc_type):
        if self.refused is None:
            self.refused = what + self._where()
            self.refusals.append(self.refused)
            if self.out is not None:
                _emit(self.out, event="refused", message=self.refused)
        raise exc_type(f"the grader refuses this: {what}")

    def _check_path(self, raw: str, writes: bool) -> None:
        real = os.path.realpath(raw)
        absolute = os.path.abspath(raw)
        for p in (absolute, real):
            parts = p.split(os.sep)
            if parts[1:2] == ["proc"] and len(parts) > 2:
                if parts[2] not in ("self", "thread-self", self.pid) or "fd" in parts[3:] or writes:
                    self._refuse(f"opens {p} (another process's entries or a descriptor)", PermissionError)
            if p.startswith("/dev/fd/") or (parts[1:2] == ["dev"] and parts[2:3] in (["stdout"], ["stderr"])):
                self._refuse(f"opens {p} (a descriptor)", PermissionError)
            if any(p.startswith(prefix) for prefix in self.blocked_prefixes):
                self._refuse(f"opens the grader's work folder ({p})", PermissionError)
        if real in self.blocked_files:
            self._refuse(f"opens {real}", PermissionError)
        for d in self.blocked_dirs:
            if real.startswith(d):
                shown = os.path.relpath(real, os.path.dirname(os.path.dirname(d)))
                self._refuse(f"imports or reads sapo_lab (opens {shown})", PermissionError)
        if writes and real != os.devnull:
            self._refuse(f"writes a file ({real})", PermissionError)

    def __call__(self, event, args):
        if event == "object.__getattr__" and len(args) > 1 and args[1] == TRACEBACK_FRAME:
            self._refuse("inspects the grader's frames (a traceback's tb_frame)", PermissionError)
        if event == "import":
            name = _plain_path(args[0]) or ""
            if self.refuse_package and (name == "sapo_lab" or name.startswith("sapo_lab.")):
                self._refuse(f"imports {name}", ImportError)
        elif event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            if not isinstance(path, int):  # an int is a descriptor the process already holds
                plain = _plain_path(path)
                if plain is None:
                    self._refuse(f"opens a path of its own type ({type(path).__name__})", PermissionError)
                writes = (type(mode) is str and any(c in mode for c in "wax+")) or (
                    type(flags) is int and bool(flags & WRITE_FLAGS))
                self._check_path(plain, writes)
        elif event in ("os.listdir", "os.scandir") and args and args[0] is not None and not isinstance(args[0], int):
            plain = _plain_path(args[0])
            if plain is None:
                self._refuse(f"lists a path of its own type ({type(args[0]).__name__})", PermissionError)
            self._check_path(plain, False)
        elif event in REFUSED_EVENTS:
            self._refuse(f"{REFUSED_EVENTS[event]} ({event})", PermissionError)
        elif event.startswith("ctypes."):
            self._refuse(f"calls C code through ctypes ({event})", PermissionError)
        elif event.startswith(SPAWN_EVENTS):
            self._refuse(f"starts a process ({event})", PermissionError)


def _not_a_function(part: str, value) -> str:
    """The error of a part the module does not define as a function (``missing:`` marks it true of every case)."""
    if value is None:
        return f"missing: define {part}()"
    kind = type(value).__name__
    return f"not a function: {part} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}; define {part}() with def"


def _emit(out, **record) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):
        return "MemoryError: past the grader's memory limit"
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":").splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _read_tensors(stream, head: dict):
    """The tensors that follow a request's header line: raw bytes of ``head["dtype"]`` in ``head["shapes"]``."""
    import torch

    dtype = getattr(torch, head["dtype"])
    size = torch.empty((), dtype=dtype).element_size()
    tensors = []
    for shape in head["shapes"]:
        n = size * math.prod(shape)
        data = stream.read(n)
        if len(data) != n:
            raise EOFError("the trainer's request ended early")
        tensors.append(torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape) if n else
                       torch.empty(shape, dtype=dtype))
    return tensors


def _sought_sapo_lab(exc: BaseException, refusals: list) -> bool:
    """Whether the module was refused: by the audit hook, or by looking for sapo_lab where it is not installed (in
    the sandbox, importlib finds no sapo_lab and raises before any hook hears of it), which is recorded as the
    hook's refusals are."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "sapo_lab" and not refusals:
        refusals.append("imports sapo_lab (not installed where a submission runs)")
    return bool(refusals)


def remote_functions(names, fds) -> dict:
    """Stand-ins for the handout's functions ``names``: each sends its arguments to the grading process, which
    computes the plain-torch answer there (``stand_ins.py``), and returns that answer as a tensor through which
    gradients flow (a backward pass asks the grading process for the gradient with respect to each tensor
    argument). No line of the answers' code is in this process. ``fds``: the request pipe's writing end and the
    reply pipe's reading end, opened before the guard."""
    import torch

    requests, replies = os.fdopen(fds[0], "wb"), os.fdopen(fds[1], "rb")

    def exchange(head: dict, tensors) -> tuple[dict, list]:
        head = {**head, "shapes": [list(t.shape) for t in tensors]}
        _reply(requests, head, b"".join(t.detach().to(torch.float64).contiguous().numpy().tobytes() for t in tensors))
        reply = json.loads(replies.readline())
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply, _read_tensors(replies, {"dtype": "float64", "shapes": reply["shapes"]})

    class StandIn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, head, *tensors):
            reply, (value,) = exchange(head, tensors)
            ctx.call_id = reply["id"]
            ctx.dtypes = [t.dtype for t in tensors]
            floating = [t.dtype for t in tensors if t.is_floating_point()]
            return value.to(floating[0] if floating else torch.float64)

        @staticmethod
        def backward(ctx, grad):
            reply, sent = exchange({"op": "backward", "id": ctx.call_id}, [grad])
            sent = iter(sent)
            grads = [next(sent).to(dtype) if flows and dtype.is_floating_point else None
                     for flows, dtype in zip(reply["grads"], ctx.dtypes, strict=True)]
            return (None, *grads)

    def stand_in(name):
        def call(*args, **kwargs):
            tensors = []

            def place(value):
                if torch.is_tensor(value):
                    tensors.append(value)
                    return {"tensor": len(tensors) - 1}
                if isinstance(value, (int, float, str, bool)) or value is None:
                    return value
                raise TypeError(f"the grader's {name} takes tensors, numbers and texts, not a {type(value).__name__}")

            head = {"op": "call", "name": name, "args": [place(a) for a in args],
                    "kwargs": {k: place(v) for k, v in kwargs.items()}}
            return StandIn.apply(head, *tensors)
        call.__name__ = call.__qualname__ = name
        return call

    return {name: stand_in(name) for name in names}


def _reply(stream, head: dict, payload: bytes = b"") -> None:
    stream.write(json.dumps(head).encode() + b"\n" + payload)
    stream.flush()


def serve(fn, fds, refusals, out) -> int:
    """The training part's loss service: for each request (a JSON header line, then logp, behavior_logp,
    advantages and mask as raw bytes) call the student's ``sapo_loss`` and reply with its value and its gradient
    with respect to ``logp`` (zeros where none flows), or one line of error. The trainer runs in another process,
    so the student's code never shares a process with sapo_lab; the guard stays installed throughout."""
    import torch

    requests, replies = fds
    for line in iter(requests.readline, b""):
        head = json.loads(line)
        logp, behavior_logp, advantages, mask = _read_tensors(requests, head)
        if not callable(fn):
            _reply(replies, {"error": _not_a_function("sapo_loss", fn)})
            continue
        logp.requires_grad_(True)
        try:
            loss = fn(logp, behavior_logp, advantages, mask, tau_pos=head["tau_pos"], tau_neg=head["tau_neg"])
            if not torch.is_tensor(loss) or loss.numel() != 1:
                shape = list(loss.shape) if torch.is_tensor(loss) else type(loss).__name__
                raise TypeError(f"sapo_loss returned {shape}, not a 0-d tensor")
            grad = None
            if loss.requires_grad:
                grad = torch.autograd.grad(loss.reshape(()), logp, allow_unused=True)[0]
            grad = torch.zeros_like(logp) if grad is None else grad.detach().to(logp.dtype)
            value = float(loss.detach().reshape(()))
        except NotImplementedError:
            if refusals:
                break
            _reply(replies, {"not_implemented": True})
            continue
        except BaseException as exc:  # noqa: BLE001 - a student's error is reported, not raised
            if _sought_sapo_lab(exc, refusals):
                break
            _reply(replies, {"error": _one_line(exc)})
            continue
        if refusals:
            break
        _reply(replies, {"loss": value}, grad.contiguous().numpy().tobytes())
    if refusals:
        _emit(out, event="refused", message=refusals[0])
        _reply(replies, {"refused": refusals[0]})
    return 0


def _limit_memory(extra_bytes: int) -> None:
    """Cap the process's address space at what it holds now (torch loaded) plus ``extra_bytes``, the hard limit
    too, so the module cannot raise it again: a call that allocates past it raises MemoryError, reported as that
    call's error."""
    import resource

    with open("/proc/self/statm") as f:
        held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = held + int(extra_bytes)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


# seccomp: (AUDIT_ARCH, system call numbers) of the machines whose filter is written here
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, {"fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone": 56, "clone3": 435},
               317),
    "aarch64": (0xC00000B7, {"execve": 221, "execveat": 281, "clone": 220, "clone3": 435}, 277),
}


def _filter_program(arch: int, calls: dict) -> list:
    """A seccomp filter (classic BPF) that refuses new processes and programs: fork, vfork and clone without
    CLONE_THREAD fail with EPERM (threads stay allowed), clone3 with ENOSYS (the C library then uses clone),
    execve and execveat with EPERM; a system call of another ABI ends the process."""
    import errno

    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    eperm, enosys = 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill),  # the ABI this filter's numbers belong to
            (ld, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # x32's numbers
    for name in ("fork", "vfork", "execve", "execveat"):
        if name in calls:
            prog += [(jeq, 0, 1, calls[name]), (ret, 0, 0, eperm)]
    prog += [(jeq, 0, 1, calls["clone3"]), (ret, 0, 0, enosys),
             (jeq, 0, 4, calls["clone"]), (ld, 0, 0, 16), (jset, 0, 1, 0x00010000),  # CLONE_THREAD in flags
             (ret, 0, 0, allow), (ret, 0, 0, eperm), (ret, 0, 0, allow)]
    return prog


def _forbid_new_processes() -> str | None:
    """Install the filter of :func:`_filter_program` on every thread of this process (it cannot be removed, and
    every later thread inherits it); None when done, else why not."""
    import ctypes
    import platform

    machine = platform.machine()
    if not sys.platform.startswith("linux") or machine not in _SECCOMP_ARCH:
        return f"no seccomp filter for {sys.platform} on {machine}"
    arch, calls, seccomp_call = _SECCOMP_ARCH[machine]

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    prog = _filter_program(arch, calls)
    table = (Instruction * len(prog))(*[Instruction(*i) for i in prog])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, which a filter needs without privileges
        return f"PR_SET_NO_NEW_PRIVS failed (errno {ctypes.get_errno()})"
    # SECCOMP_SET_MODE_FILTER with SECCOMP_FILTER_FLAG_TSYNC: every thread torch started gets it too
    if libc.syscall(seccomp_call, 1, 1, ctypes.byref(Program(len(prog), table))) != 0:
        return f"seccomp failed (errno {ctypes.get_errno()})"
    return None


def probe(argv) -> int:
    """``sandbox.py --probe HIDDEN SITE...``, run inside a fresh sandbox by the grader: print ``isolated`` when
    every path of HIDDEN (joined by os.pathsep: the package, the tests, the frozen outputs) is out of sight, every
    SITE folder is there, and starting a process fails."""
    hidden, sites = argv[2].split(os.pathsep), argv[3:]
    seen = [h for h in hidden if os.path.exists(h)]
    if seen:
        print(f"{seen[0]} is visible in the sandbox")
        return 1
    missing = [s for s in sites if not os.path.isdir(s)]
    if missing:
        print(f"{missing[0]} is missing in the sandbox")
        return 1
    why = _forbid_new_processes()
    if why:
        print(why)
        return 1
    try:
        pid = os.fork()
    except PermissionError:
        print("isolated")
        return 0
    if pid == 0:
        os._exit(0)
    print("a process started past the seccomp filter")
    return 1


def main(argv) -> int:
    """Import the student's module under the guard and run the request's calls (see the module's docstring)."""
    request = json.loads(sys.stdin.buffer.readline())  # the request comes over a pipe, never through a file
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    out = os.fdopen(int(argv[1]), "w")  # an inherited pipe to the grading process, one line per event
    sys.path += request.get("site_dirs", [])  # in the sandbox (no site module): where torch and numpy are
    import torch

    torch.set_num_threads(1)
    # the handout's functions that stand in for the student's other parts: computed by the grading process
    substitutes = remote_functions(request["substitute_names"], request["stand_in"]) if request.get("stand_in") else {}
    sys.path[:0] = request.get("extra_sys_path", [])
    if "serve" in request:  # opened before the guard, which refuses nothing on them
        request["serve"] = (os.fdopen(request["serve"][0], "rb"), os.fdopen(request["serve"][1], "wb"))
    if request.get("memory_limit"):
        _limit_memory(request["memory_limit"])
    why_not = _forbid_new_processes()
    if why_not and request.get("isolated"):
        print(f"the sandbox could not forbid new processes: {why_not}", flush=True)
        return 1
    here = os.path.realpath(__file__)
    refusals: list = []  # what the guard refused; the guard itself is held by no frame the module can reach
    guard_settings = (request["blocked_dirs"], request["blocked_files"], not request["allow_sapo_lab"], here,
                      request.get("blocked_prefixes", ()))
    path = request["module"]
    substitute_names = set(request["substitute_names"])
    parts, calls = request["parts"], request["calls"]
    sys.dont_write_bytecode = True
    sys.addaudithook(Guard(*guard_settings, out=out, refusals=refusals))
    del guard_settings
    _emit(out, event="ready")

    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec = importlib.util.spec_from_file_location("student_submission", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["student_submission"] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt at import are reported too
        if _sought_sapo_lab(exc, refusals):
            _emit(out, event="refused", message=refusals[0])
        else:
            _emit(out, event="import_failed", message=_one_line(exc))
        return 0
    if refusals:
        _emit(out, event="refused", message=refusals[0])
        return 0
    _emit(out, event="imported")
    if "serve" in request:  # the training part: the trainer, in another process, asks for sapo_loss call by call
        return serve(getattr(module, "sapo_loss", None), request["serve"], refusals, out)
    own = {name: getattr(module, name, None) for name in parts}
    for call in calls:
        part = call["part"]
        for name, fn in substitutes.items():
            if name in substitute_names:
                setattr(module, name, fn)
        fn = own.get(part)
        if not callable(fn):
            _emit(out, event="result", key=call["key"], error=_not_a_function(part, fn))
            continue
        setattr(module, part, fn)
        _emit(out, event="start", key=call["key"])
        try:
            recorded, meta = observe_with_meta(part, fn, call["kwargs"])
        except NotImplementedError:
            _emit(out, event="result", key=call["key"], error="not implemented")
            continue
        except BaseException as exc:  # noqa: BLE001 - a student's error is reported, not raised
            if _sought_sapo_lab(exc, refusals):
                break
            _emit(out, event="result", key=call["key"], error=f"raises {_one_line(exc)}")
            continue
        if refusals:
            break
        _emit(out, event="result", key=call["key"], outputs=recorded, meta=meta)
    if refusals:
        _emit(out, event="refused", message=refusals[0])
        return 0
    _emit(out, event="done")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--probe"]:
        sys.exit(probe(sys.argv))
    if sys.path and os.path.realpath(sys.path[0] or ".") == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]  # the folder of this file (when not started with -I): sapo_lab's modules by short name
    status = main(sys.argv)
    sys.stdout.flush()
    os._exit(status)  # threads the module started do not keep this process (and the grader) waiting
