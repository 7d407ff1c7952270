"""What a study invocation ran on: versions, commit, hardware, and a fingerprint of the CPU's kernels."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import subprocess
import sys

from .._version import __version__
from ..runs.kernels import KERNEL_SETTINGS, VARIABLES, current_kernel_setting, kernel_setting_env
from ..runs.study_folder import StudyFolder


def kernel_fingerprint() -> str:
    """A hash of the exact bits of one cpu-tiny forward and backward pass on this machine.

    CPUs with other vector units (AVX-512 or not) run other matmul kernels, whose float
    results differ in the last bits; over a cold start's hundreds of updates that changes
    sampled tokens. Runs reproduce bit for bit only where this fingerprint matches.
    """
    import torch  # here, not at the top: a kernel setting must be applied before torch loads

    from ..training.model import build_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # runs train on one thread; a second one sums in another order
    try:
        with torch.random.fork_rng():
            model = build_model("cpu-tiny", seed=0)
            ids = torch.arange(64).remainder(model.config.vocab_size).reshape(4, 16)
            logits = model(ids, attention_mask=torch.ones_like(ids)).logits.float()
            logits.logsumexp(-1).sum().backward()
    finally:
        torch.set_num_threads(threads)
    digest = hashlib.sha256(logits.detach().numpy().tobytes())
    for p in model.parameters():
        digest.update(p.grad.numpy().tobytes())
    return digest.hexdigest()[:16]


@functools.cache
def kernel_fingerprint_under(name: str, timeout: float = 300.0) -> str:
    """:func:`kernel_fingerprint` in a fresh interpreter under kernel setting ``name`` (torch reads the
    variables once, so another setting needs another process)."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(kernel_setting_env(name), OMP_NUM_THREADS="1")
    code = "from sapo_lab.studies.environment import kernel_fingerprint; print(kernel_fingerprint())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"fingerprint under {name!r} failed: {out.stderr.strip().splitlines()[-1:]}")
    return out.stdout.strip().splitlines()[-1]


def matching_kernel_setting(fingerprints: set[str]) -> str | None:
    """The first kernel setting (in :data:`KERNEL_SETTINGS` order) under which this machine's fingerprint is one
    of ``fingerprints``; ``None`` when none is."""
    for name in KERNEL_SETTINGS:
        if kernel_fingerprint_under(name) in fingerprints:
            return name
    return None


def producer_kernels(study_folder) -> tuple[set, set]:
    """The kernel fingerprints a study's runs were made on, and those it is known not to reproduce on.

    From each invocation in ``environment.json`` and from ``kernel_fingerprint.json`` where a study ran
    before the field existed (its ``differs_from`` lists kernels measured not to reproduce it). A study
    with no recorded fingerprint has an empty first set: it is reproducible nowhere that can be named.
    """
    folder = StudyFolder(os.fspath(study_folder))
    known = {inv["kernel_fingerprint"] for inv in folder.read_invocations() if inv.get("kernel_fingerprint")}
    record = folder.read_kernel_record()
    known |= {record.get("kernel_fingerprint")} - {None}
    excluded = set(record.get("differs_from", []))
    return known - excluded, excluded


def capture_environment() -> dict:
    """The versions, commit, hardware, kernel fingerprint and command line of this invocation."""
    import torch  # loaded already by the runner; kept out of this module's top for kernel_fingerprint's sake

    here = os.path.dirname(os.path.abspath(__file__))

    def git(*args):  # the commit of the sapo_lab that runs, wherever the study is started from
        try:
            out = subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=10)
            return out.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    import transformers

    return {
        "sapo_lab_version": __version__,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "kernel_fingerprint": kernel_fingerprint(),
        "kernel_setting": current_kernel_setting(),
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "argv": sys.argv,
    }
