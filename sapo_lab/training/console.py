"""The trainer at a terminal: its progress bar, the pace of a long cold start, and Ctrl-C as a request to stop
after the current step."""

from __future__ import annotations

import contextlib
import signal
import time

from tqdm.auto import tqdm

from ..runs.metric_names import DEV_PASS1, REWARD_MEAN
from .device import duration_text

# Seconds between progress lines where no bar is drawn (a log file, a pipe, ``progress=False``).
PACE_EVERY_S = 10.0


class ProgressBar:
    """A tqdm bar over rollout steps showing the last reward and the last measured dev Pass@1.

    Where the bar is not drawn (not a terminal, or ``enabled=False``) and ``log`` is given, a
    :class:`PaceReport` line says the step, the reward and the time instead, every ``PACE_EVERY_S`` seconds.
    """

    def __init__(self, *, total: int, initial: int, desc: str, enabled: bool | None, log=None,
                 clock=time.perf_counter):
        self._bar = tqdm(total=total, initial=initial, desc=desc, disable=None if enabled is None else not enabled,
                         dynamic_ncols=True)
        self._last_dev, self._done = None, initial
        self._pace = None
        if self._bar.disable and log is not None:
            self._pace = PaceReport(log, total=total, what="rollout step", every_s=PACE_EVERY_S, clock=clock,
                                    done_before=initial, stops_early=False)

    def show(self, row: dict) -> None:
        """One step done: advance and show its reward (and its dev Pass@1 when measured)."""
        if row.get(DEV_PASS1) is not None:
            self._last_dev = row[DEV_PASS1]
        self._done += 1
        self._bar.update(1)
        dev = f"{self._last_dev:.2f}" if self._last_dev is not None else "-"
        self._bar.set_postfix(reward=f"{row[REWARD_MEAN]:.2f}", dev=dev)
        if self._pace is not None:
            self._pace(self._done, reward=row[REWARD_MEAN])

    def close(self) -> None:
        self._bar.close()


class PaceReport:
    """Progress lines for a loop of ``total`` items whose pace is unknown until it runs (a cold start on a CPU,
    rollout steps written to a log).

    A line after the first item when the rest looks longer than ``every_s`` seconds, then one every
    ``every_s`` seconds; a loop that finishes sooner says nothing. Lines, not a bar: they reach a log file
    or a pipe too. ``done_before`` items were done before this report started (a resumed run);
    ``stops_early`` says the loop may end before ``total`` (a cold start at its target), so counts and the time
    left read "up to". ``clock`` is replaceable so that a test can drive the time.
    """

    def __init__(self, log, *, total: int, what: str, every_s: float = 10.0, clock=time.perf_counter,
                 done_before: int = 0, stops_early: bool = True):
        self.log, self.total, self.what, self.every_s, self.clock = log, total, what, every_s, clock
        self.done_before, self.stops_early = done_before, stops_early
        self.start = self.last_shown = clock()

    def __call__(self, done: int, loss=None, **values) -> None:
        """``done`` items finished; ``loss`` (a tensor, read only when shown) and ``values`` (floats) are shown."""
        now = self.clock()
        per_item = (now - self.start) / (done - self.done_before)
        left = per_item * (self.total - done)
        if (done == self.done_before + 1 and left > self.every_s) or now - self.last_shown >= self.every_s:
            self.last_shown = now
            shown = ([] if loss is None else [("loss", float(loss))]) + list(values.items())
            numbers = "".join(f", {name} {value:.3f}" for name, value in shown)
            bound, estimate = ("up to ", "up to") if self.stops_early else ("", "about")
            self.log(f"{self.what} {done} of {bound}{self.total}{numbers}, {duration_text(now - self.start)} elapsed, "
                     f"{per_item:.2f} s each, {estimate} {duration_text(left)} left")


@contextlib.contextmanager
def progress_bar(**kwargs):
    """:class:`ProgressBar` closed on the way out, whatever happens."""
    bar = ProgressBar(**kwargs)
    try:
        yield bar
    finally:
        bar.close()


@contextlib.contextmanager
def ctrl_c_requests_stop(trainer):
    """While inside: the first Ctrl-C calls ``trainer.request_stop()``, a second one stops at once.

    Outside the main thread (where handlers cannot be set) Ctrl-C keeps its usual meaning.
    """

    def on_sigint(signum, frame):
        if trainer.stop_requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        trainer.request_stop()

    previous = None
    if hasattr(signal, "SIGINT"):
        try:
            previous = signal.signal(signal.SIGINT, on_sigint)
        except ValueError:  # not the main thread
            previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
