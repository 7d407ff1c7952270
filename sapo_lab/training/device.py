"""``device="auto"``: CUDA when present, else CPU, said in one line with the run's estimated cost. One code path
on both, and one timer."""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass

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


# ------------------------------------------------------------ what a run costs where it landed


@dataclass(frozen=True)
class PlannedWork:
    """The floating-point work a run asks for, counted before it starts (an estimate: padding, sampling's
    Python overhead and early stops are left out).

    ``matmul_parameters`` is None for a model given by path, whose size is unknown until it loads.
    """

    matmul_parameters: int | None
    width: int
    cold_start_updates: int
    cold_start_update_flops: float
    rollout_steps: int
    flops: float
    cold_start_flops: float = 0.0  # the part of ``flops`` the cold start may spend: it stops at its target Pass@1
    time_limit_s: float = 0.0  # ``max_train_time_s``: the rollout steps stop after it (0: no limit)


def matmul_parameters(size: dict, vocab: int) -> int:
    """Weights a token is multiplied by in a GPT-2 of ``size``: 12 d^2 a layer and the d x vocab output head."""
    d = size["n_embd"]
    return 12 * size["n_layer"] * d * d + d * vocab


def planned_work(cfg, task, splits, *, cold_start_cached: bool, resume: bool) -> PlannedWork:
    """The run's work in FLOPs: 2 per weight and token forward, 6 forward and backward; a rollout token is
    sampled, scored once more and trained on (about 10); the cold start's dev checks and the two held-out
    evaluations sample."""
    from .model import MODEL_SIZES

    size = MODEL_SIZES.get(cfg.model.name_or_path)
    cold = 0 if (cold_start_cached or resume) else cfg.cold_start.max_updates
    steps = cfg.optimization.max_steps
    if size is None:
        return PlannedWork(None, 0, cold, float("nan"), steps, float("nan"), time_limit_s=cfg.max_train_time_s or 0.0)
    params = matmul_parameters(size, size.get("vocab_size", len(task.alphabet) + 3))
    sample = splits["train"][:256]
    sft_tokens = max(len(p.prompt) + len(p.answer) + 1 for p in sample)  # a batch is padded to its longest
    gen_tokens = sum(len(p.prompt) for p in sample) / len(sample) + cfg.rollout.max_completion_length
    c, r, e = cfg.cold_start, cfg.rollout, cfg.evaluation
    update_flops = params * c.batch_size * sft_tokens * 6
    cold_flops = cold * c.batch_size * sft_tokens * 6 + cold // c.eval_every * len(splits["dev"]) * gen_tokens * 2
    rollout_flops = steps * r.prompts_per_rollout * r.num_generations * gen_tokens * 10
    eval_flops = (0 if resume else 2) * len(splits["eval"]) * e.num_samples * gen_tokens * 2
    return PlannedWork(params, size["n_embd"], cold, update_flops, steps, params * (cold_flops + rollout_flops + eval_flops),
                       cold_start_flops=params * cold_flops, time_limit_s=cfg.max_train_time_s or 0.0)


@functools.cache
def cpu_flops_per_second(width: int, seconds: float = 0.05) -> float:
    """This CPU's float32 rate on the matrix product a layer of hidden size ``width`` makes (256 tokens by
    width by 4 width), measured for about ``seconds`` once per process and width."""
    a, b = torch.randn(256, width), torch.randn(width, 4 * width)
    torch.mm(a, b)  # the first product pays for allocation and thread start-up
    done, start = 0, time.perf_counter()
    while done < 2 or time.perf_counter() - start < seconds:
        torch.mm(a, b)
        done += 1
    return done * 2 * 256 * width * 4 * width / (time.perf_counter() - start)


def duration_text(seconds: float) -> str:
    """``under 1 s``, ``42 s``, ``7 min``, ``13.5 h``, ``29 days``: a duration at the precision an estimate deserves."""
    if seconds < 1:
        return "under 1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def estimate_text(seconds: float, bound: str = "about") -> str:
    """``about 42 s`` (or ``at least``), and ``under 1 s`` where a bound on nothing would read oddly."""
    return duration_text(seconds) if seconds < 1 else f"{bound} {duration_text(seconds)}"


# An estimate above this gets a warning and the keys that shorten the run.
LONG_RUN_S = 600.0


def _cost_text(work: PlannedWork, rate: float) -> tuple[str, float]:
    """What the run will cost at ``rate`` FLOP/s, and the most it may take in seconds.

    The rollout steps and evaluations are certain, and a FLOP count at the measured peak rate is a lower bound
    on their time; the cold start stops once dev Pass@1 reaches its target, so its share is an upper bound.
    """
    certain = (work.flops - work.cold_start_flops) / rate
    cold = work.cold_start_flops / rate
    text = estimate_text(certain, "at least")
    if work.cold_start_updates:
        text += " for the rollout steps and evaluations"
    if work.time_limit_s:
        text += f" (max_train_time_s stops the rollout steps after {duration_text(work.time_limit_s)})"
    text += f" at this CPU's measured {rate / 1e9:.0f} GFLOP/s"
    if work.cold_start_updates:
        text += f", plus {estimate_text(cold, 'up to')} for the cold start (it stops early once dev pass@1 reaches its target)"
    return text, certain + cold


def cpu_fallback_notice(requested: str, device: torch.device, work: PlannedWork) -> str | None:
    """One line when ``device auto`` found no GPU: the device chosen and what the run will cost on it.

    ``note:`` or, when the run may take longer than ``LONG_RUN_S``, ``warning:`` with the reason and the keys
    that shorten it. None when the device was named (``--device cpu`` is a choice, not a fallback) or a GPU
    was found.
    """
    if requested != "auto" or device.type != "cpu":
        return None
    known = work.matmul_parameters is not None
    rate = cpu_flops_per_second(work.width) if known else float("nan")
    each = f" ({estimate_text(work.cold_start_update_flops / rate)} each)" if known else ""
    plan = (f"a cold start of up to {work.cold_start_updates} updates{each}, then {work.rollout_steps} rollout steps"
            if work.cold_start_updates else f"{work.rollout_steps} rollout steps (no cold start to train)")
    if known:
        cost, seconds = _cost_text(work, rate)
        long = seconds > LONG_RUN_S
    else:
        cost, long = "time not estimated for a model given by path", False
    head = "warning" if long else "note"
    why = (f"; a warning because it may take over {duration_text(LONG_RUN_S)}: --cold_start.max_updates N and "
           "--max_steps N shorten it") if long else ""
    return f"{head}: no GPU found: device auto chose the CPU; this run: {plan}, {cost}{why}; --device cpu skips this line"


# The notices already given in this process: a study or ``compare`` of many runs on one CPU says it once.
_SAID: set[str] = set()


def say_once(log, line: str) -> None:
    """``log(line)`` unless this process has said the same line before."""
    if line not in _SAID:
        _SAID.add(line)
        log(line)
