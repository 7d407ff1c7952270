"""``device="auto"``: CUDA when present, else CPU. One code path on both, and one timer."""

from __future__ import annotations

import contextlib
import time

import torch


def resolve_device(name: str = "auto") -> torch.device:
    """``"auto"`` -> CUDA if available, else CPU; an explicit ``"cuda[:N]"`` without CUDA is refused."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available; use device=auto or cpu")
    return dev


def autocast_for(device: torch.device):
    """bf16 autocast on CUDA, nothing on CPU: one code path for both."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def synchronize(device: torch.device) -> None:
    """Wait for queued CUDA work, so that a timing lands on the phase that did the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ModelTimer:
    """Adds up the wall time of the blocks it wraps (``with timer: ...``), synchronizing CUDA at each end."""

    def __init__(self, device: torch.device):
        self.device, self.seconds, self._start = device, 0.0, None

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        synchronize(self.device)
        self.seconds += time.perf_counter() - self._start
        return False
