"""The doctor's reading where a plain log would not show a mistake: a quarter of a twelve-step series, "every
group agreed" needing every step, the clip note on an inert gate, and a logged share of exactly 0. Each log is
built here with values whose outcome is worked out in the comments."""

import json

import pytest

from sapo_lab.runs.doctor import SERIES, RunLog, diagnose, read_run
from sapo_lab.runs.run_folder import RunDirError


def _log(steps, settings=None, **series):
    full = {name: [None] * steps for name in SERIES}
    for name, values in series.items():
        full[name] = list(values) if isinstance(values, (list, tuple)) else [values] * steps
    return RunLog(path="planted", kind="sapo_lab", steps=list(range(1, steps + 1)), series=full,
                  settings=settings or {})


def test_a_quarter_of_twelve_steps_is_three():
    """Entropy 1 for eight steps, then 0.5, 0.02, 0.02, 0.02. The last quarter (three steps) averages 0.02, under
    0.1 x the first quarter's 1: collapse. Catches a window of a third (four steps: (0.5 + 0.06) / 4 = 0.14, no
    collapse) or of any other length."""
    log = _log(12, max_abs_log_ratio=0.1, signal_removed=0.05, entropy=[1.0] * 8 + [0.5, 0.02, 0.02, 0.02])
    reading = diagnose(log)
    assert reading.numbers["entropy_first"] == 1.0
    assert reading.numbers["entropy_last"] == pytest.approx(0.02, abs=1e-12)
    assert reading.collapse_signs == ["entropy fell from 1 (first quarter) to 0.02 (last quarter), under 0.1 x its start"]


def test_no_token_trained_needs_every_step_to_agree():
    """No step measured a ratio and no token count is logged. Every group's rewards agreeing on every step (a
    share of 1 each time) shows that nothing was trained; agreeing on some steps only does not, and the log is
    then called incomplete. Catches ``any`` for ``all``."""
    agreed = diagnose(_log(3, zero_spread=[1.0, 1.0, 1.0]))
    assert agreed.regime == "no token trained"
    assert agreed.lines[0] == ("no token trained: none of the 3 logged steps updated on a token (every group's "
                               "rewards agreed, so every advantage was 0)")
    with pytest.raises(RunDirError, match="the log is incomplete, so the regime cannot be read"):
        diagnose(_log(3, zero_spread=[1.0, 0.5, 1.0]))


@pytest.mark.parametrize(("removed", "regime"), [(0.005, "gate inert"), (0.05, "gate active")])
def test_a_clip_loss_is_told_its_gate_is_the_clip_when_inert_too(removed, regime):
    """Catches the note given only for an active gate: an inert reading of a grpo run also speaks of "the gate"."""
    reading = diagnose(_log(4, {"loss_type": "grpo"}, max_abs_log_ratio=0.3, signal_removed=removed))
    assert reading.regime == regime
    assert reading.lines[1] == ("loss_type grpo: its 'gate' is the kernel it weighs r with (a clip for grpo and "
                                "gspo), not SAPO's soft gate")


def _run(tmp_path, share):
    rows = [{"step": s, "ratio/max_abs_log_ratio": 0.4, "ratio/q01": 0.8, "ratio/q99": 1.3,
             "losses/signal_removed_frac": share, "rollout/zero_advantage_group_frac": share} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_run(str(tmp_path))


def test_a_share_of_exactly_zero_is_a_reading_and_below_zero_is_damage(tmp_path):
    """A share lies in [0, 1], ends included: 0 removed and 0 zero-spread groups read as an inert gate whose groups
    do not dominate. Catches the lower end made open (a share of 0 called a damaged log)."""
    reading = diagnose(_run(tmp_path, 0.0))
    assert reading.regime == "gate inert" and not reading.zero_spread_dominates
    with pytest.raises(RunDirError, match=r"signal_removed = -0\.01 at step 1 lies outside \[0, 1\]"):
        _run(tmp_path, -0.01)
