"""What a study invocation ran on: versions, commit, hardware, and a fingerprint of the CPU's kernels."""

from __future__ import annotations

import os
import platform
import subprocess
import sys


def kernel_fingerprint() -> str:
    """A hash of the exact bits of one cpu-tiny forward and backward pass on this machine.

    CPUs with other vector units (AVX-512 or not) run other matmul kernels, whose float
    results differ in the last bits; over a cold start's hundreds of updates that changes
    sampled tokens. Runs reproduce bit for bit only where this fingerprint matches.
    """
    import hashlib

    import torch

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


def capture_environment() -> dict:
    """The versions, commit, hardware, kernel fingerprint and command line of this invocation."""
    import torch

    from .._version import __version__

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
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "argv": sys.argv,
    }
