"""The operating system's boundary around a student's process: a bubblewrap (``bwrap``) sandbox.

The student's process sees a file system of its own: the Python installation and, of site-packages, the files of
torch, numpy and what they require, read-only; its submission alone in ``/submission``, read-only; the
grader's harness (``sandbox.py``, which imports nothing of sapo_lab) in ``/grader``; an empty ``/tmp``, ``/dev/shm``
and home of a few MiB that vanish with it, the only places it can write. The repository, the frozen outputs, the
grader's work folders and every other process are out of its sight: it has namespaces of its own for mounts,
processes, network (none), IPC, host name and users, no capabilities, and it dies when the grading process dies.
The harness then forbids new processes with a seccomp filter and caps the address space before the student's
module is imported (``sandbox.py``); the Python audit hook stays as a second layer that names what a module tried.

Where ``bwrap`` is missing, or cannot start a sandbox here, :func:`sandbox_status` says why, and the grader runs
the student's process as before, guarded by the audit hook alone, with :data:`NOT_ISOLATED` on the report.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HARNESS = Path(__file__).resolve().with_name("sandbox.py")
PACKAGE_DIR = Path(__file__).resolve().parents[1]
ROOT = PACKAGE_DIR.parent
# Where things appear inside the sandbox.
SUBMISSION_DIR = "/submission"
HARNESS_IN_SANDBOX = "/grader/sandbox.py"
HOME = "/home/student"
# Bytes the sandbox's /tmp and home may hold (a tmpfs is memory); the guard refuses writes before this matters.
TMPFS_BYTES = 16 * 2**20
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
NOT_ISOLATED = "NOT ISOLATED: {why}; the audit hook alone guarded this run, which is not for credit"
ISOLATED = ("isolated by bubblewrap: the submission alone, read-only, with Python, torch and numpy; no repository, "
            "no network, no new processes")


@dataclass(frozen=True)
class SandboxStatus:
    """Whether the student's processes run in a bubblewrap sandbox here, and the line the report carries."""

    isolated: bool
    why: str = ""

    @property
    def line(self) -> str:
        return ISOLATED if self.isolated else NOT_ISOLATED.format(why=self.why)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _requirement_name(requirement: str) -> str:
    for stop in ";[<>=!~ (":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower().replace("_", "-")


@functools.cache
def _distributions(names=("torch", "numpy")) -> tuple:
    """``names`` and every distribution they require (not their extras), installed here."""
    seen, found, todo = set(), [], list(names)
    while todo:
        name = _requirement_name(todo.pop(0))
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(dist)
        todo += [r for r in dist.requires or () if "extra ==" not in r]
    return tuple(found)


@functools.cache
def site_entries() -> tuple:
    """The files and folders, each at the top of a site-packages folder, that make up torch, numpy and what they
    require (from each distribution's list of installed files): what the sandbox binds, and nothing else of
    site-packages."""
    entries = []
    for dist in _distributions():
        base = os.path.realpath(str(dist.locate_file("")))
        tops = {f.parts[0] for f in dist.files or () if f.parts and f.parts[0] != ".."}
        for top in sorted(tops):
            path = os.path.join(base, top)
            if os.path.exists(path) and path not in entries and top != "__pycache__":
                entries.append(path)
    for module in ("torch", "numpy"):  # a package importable without its list of files (a source tree)
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:
            where = os.path.realpath(list(spec.submodule_search_locations)[0])
            if not any(_under(where, e) for e in entries):
                entries.append(where)
    return tuple(entries)


def site_dirs() -> list[str]:
    """The site-packages folders the bound entries lie in: the student's process puts them on its path."""
    return list(dict.fromkeys(os.path.dirname(e) for e in site_entries()))


def python_executable() -> str:
    """The interpreter itself (a virtual environment's ``python`` is a link to it, whose folder the sandbox lacks)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _secrets() -> list[str]:
    """What must stay out of sight even where a bound folder holds it: the checkout (tests, assignment, the
    frozen outputs) and the installed sapo_lab package."""
    return [os.path.realpath(ROOT), os.path.realpath(PACKAGE_DIR)]


def mounts(submission_dir: str, allow_sapo_lab: bool = False) -> list[str]:
    """bwrap's mount arguments: the system's library folders, the interpreter's prefix and the site folders
    read-only, a secret inside any of them hidden under an empty tmpfs, the submission and the harness."""
    binds: list[tuple[str, str]] = []  # (kind, path): "bind" read-only at the same path, or "hide"
    links: list[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            links += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            binds.append(("bind", d))
    exe = python_executable()
    prefixes = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    prefixes.add(os.path.dirname(os.path.dirname(exe)))
    for p in [*sorted(prefixes), *site_entries()]:
        if not any(kind == "bind" and _under(p, b) for kind, b in binds):
            binds.append(("bind", p))
    package = os.path.realpath(PACKAGE_DIR)
    for secret in _secrets():
        if allow_sapo_lab and secret == package:
            continue  # the instructor's switch: the package stays in sight (never the tests or the frozen outputs)
        if any(_under(secret, b) for _, b in binds):
            binds.append(("hide", secret))
    if allow_sapo_lab and not any(kind == "bind" and _under(package, b) for kind, b in binds):
        binds.append(("bind", package))  # an editable install: the package alone, out of the checkout
    # shallower paths first; at one depth, a folder before what hides part of it
    binds.sort(key=lambda kb: (kb[1].count(os.sep), kb[0] == "hide"))
    args: list[str] = []
    for kind, path in binds:
        args += ["--ro-bind", path, path] if kind == "bind" else ["--tmpfs", path, "--remount-ro", path]
    return args + links + ["--ro-bind", submission_dir, SUBMISSION_DIR, "--ro-bind", str(HARNESS), HARNESS_IN_SANDBOX]


@functools.cache
def _bwrap_options() -> frozenset:
    bwrap = shutil.which("bwrap")
    try:
        text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(word for word in text.split() if word.startswith("--"))


def command(submission_dir: str, harness_args: list[str], allow_sapo_lab: bool = False) -> list[str]:
    """The command that runs the harness in a fresh sandbox (``harness_args`` after the harness's path)."""
    options = _bwrap_options()
    tmpfs_size = ["--size", str(TMPFS_BYTES)] if "--size" in options else []
    no_userns = ["--disable-userns"] if "--disable-userns" in options else []
    writable = [arg for place in ("/dev/shm", "/tmp", HOME) for arg in (*tmpfs_size, "--tmpfs", place)]
    return [shutil.which("bwrap"), "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", *no_userns,
            "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL", "--hostname", "sandbox",
            *mounts(submission_dir, allow_sapo_lab), "--proc", "/proc", "--dev", "/dev", *writable,
            # the sandbox's own root and /dev are memory without a size: read-only, so that the tmpfs above, a few
            # MiB each, are the only places a process can write
            "--remount-ro", "/dev", "--remount-ro", "/",
            "--chdir", SUBMISSION_DIR, "--clearenv", "--setenv", "HOME", HOME, "--setenv", "TMPDIR", "/tmp",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--setenv", "OMP_NUM_THREADS", "1",
            "--setenv", "MKL_NUM_THREADS", "1", "--",
            python_executable(), "-I", "-S", "-B", HARNESS_IN_SANDBOX, *harness_args]


def sandbox_status() -> SandboxStatus:
    """Whether the student's processes run in a sandbox here (``SAPO_LAB_GRADE_NO_SANDBOX`` set: never, for
    trying the audit hook alone)."""
    if os.environ.get("SAPO_LAB_GRADE_NO_SANDBOX"):
        return SandboxStatus(False, "SAPO_LAB_GRADE_NO_SANDBOX is set")
    return probe_sandbox()


@functools.cache
def probe_sandbox() -> SandboxStatus:
    """Start one sandbox and ask the harness to check it from inside: the checkout out of sight, the site
    folders importable, new processes refused. Cached for the life of this process."""
    if not sys.platform.startswith("linux"):
        return SandboxStatus(False, f"bubblewrap needs Linux, this is {sys.platform}")
    if shutil.which("bwrap") is None:
        return SandboxStatus(False, "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sapo-grade-probe-") as empty:
        hidden = os.pathsep.join(str(p) for p in (PACKAGE_DIR, ROOT / "tests", ROOT / "assignment"))
        cmd = command(empty, ["--probe", hidden, *site_dirs()])
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                                 preexec_fn=dies_with_this_process())
        except (OSError, subprocess.SubprocessError) as exc:
            return SandboxStatus(False, f"bwrap did not start: {type(exc).__name__}: {exc}".splitlines()[0][:200])
    said = (run.stdout + run.stderr).strip().splitlines()
    if run.returncode != 0 or not said or said[-1] != "isolated":
        last = said[-1][:200] if said else f"exit status {run.returncode}"
        return SandboxStatus(False, f"bwrap could not start a sandbox here ({last})")
    return SandboxStatus(True)


# ---- the student's processes die with the grading process ---------------------------------------------------
_PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl():
    """The C library's prctl (loaded when first needed: importing this module loads no C code)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def dies_with_this_process():
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets SIGKILL when the process starting it ends,
    however it ends (a signal, SIGKILL from a course's own timeout), and leaves at once if that already happened.
    (Linux sends the signal when the starting thread ends: the grader starts its children from the thread that
    waits for them.)"""
    parent, prctl = os.getpid(), _prctl()

    def arm() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return arm
