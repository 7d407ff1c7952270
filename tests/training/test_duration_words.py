"""The durations a CPU run announces, read at each unit's boundary, and the long-run warning at its bound.

``duration_text`` switches unit at 1 s, 90 s, 90 min (5400 s) and 48 h (172800 s); ``cpu_fallback_notice``
warns when the estimate exceeds 600 s. Each value sits on a boundary or just under it, with the text typed here.
"""

import pytest
import torch

from sapo_lab.training import device
from sapo_lab.training.device import PlannedWork, cpu_fallback_notice, duration_text


@pytest.mark.parametrize(("seconds", "text"), [
    (0.999, "under 1 s"), (1.0, "1 s"),
    (89.4, "89 s"), (90.0, "2 min"),          # 90 s is 1.5 min, printed to the minute
    (5399.0, "90 min"), (5400.0, "1.5 h"),
    (172799.0, "48.0 h"), (172800.0, "2 days"),
])
def test_each_unit_starts_at_its_boundary(seconds, text):
    # catches: `<=` at any of the four boundaries (1 s would read "under 1 s", 90 s "90 s", 5400 s "90 min",
    # 48 h "48.0 h"), and a unit's divisor wrong (minutes by 100, days by 3600 x 12)
    assert duration_text(seconds) == text


@pytest.mark.parametrize(("seconds", "warned"), [(599.0, False), (600.0, False), (601.0, True)])
def test_a_run_is_long_only_above_ten_minutes(monkeypatch, seconds, warned):
    # the CPU's measured rate is fixed here at 1 GFLOP/s, so a run of `seconds` x 1e9 FLOPs is estimated at
    # `seconds`, each printed as 10 min. Catches: `>=` for the long-run bound (exactly 600 s is not long), the bound
    # moved off 600 s
    monkeypatch.setattr(device, "cpu_flops_per_second", lambda width: 1e9)
    work = PlannedWork(10**4, 32, 0, 0.0, 3, seconds * 1e9)
    line = cpu_fallback_notice("auto", torch.device("cpu"), work)
    assert line.startswith("warning: no GPU found") is warned
    assert line.startswith("note: no GPU found") is not warned  # one form for both, its first word the verdict
    assert "at least 10 min at this CPU's measured 1 GFLOP/s" in line
