import contextlib
import io
import json

import pytest

from sapo_lab.viz.plots import curve_rows, plot_training_curves


def test_training_curves_from_metrics_file(tmp_path):
    rows = [
        {"step": s, "rollout/reward_mean": s / 10, "eval/dev_pass1": None if s % 2 else s / 10,
         "rollout/entropy_mean": 1 - s / 10}
        for s in range(1, 6)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert curve_rows(str(tmp_path)) == rows
    out = tmp_path / "curves.png"
    fig = plot_training_curves({"sapo": str(tmp_path)}, path=str(out))
    assert out.stat().st_size > 1000 and len(fig.axes) >= 9


def test_curves_read_metrics_as_the_run_folder_does(tmp_path):
    """Catches plots parsing metrics.jsonl with a tolerance of their own: a killed run's half-written last
    row must be left out (as the study tables do), a damaged earlier row must be an error naming its line."""
    from sapo_lab.runs.run_folder import RunDirError

    rows = [{"step": s, "rollout/reward_mean": s / 10} for s in range(1, 4)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "metrics.jsonl").write_text(text + '{"step": 4, "rewa')
    assert curve_rows(str(tmp_path)) == rows
    (tmp_path / "metrics.jsonl").write_text(text.replace('"step": 2', '"step": 2,,'))
    with pytest.raises(RunDirError, match="line 2"):
        curve_rows(str(tmp_path / "metrics.jsonl"))
    with pytest.raises(FileNotFoundError, match="no such metrics file"):
        curve_rows(str(tmp_path / "elsewhere"))


def _explorer(function, **controls):
    from sapo_lab.viz import explore

    explore.LIVE_EXPLORERS.clear()
    with contextlib.redirect_stdout(io.StringIO()):
        explore.live_explorer(function, **controls)
    return explore


@pytest.mark.parametrize(
    "function, message",
    [
        (lambda a=1.0, flag=False: a * 2 if not flag else a * 3, None),
        (lambda a=1.0, flag=False: 42.0, "left its numbers unchanged"),
        (lambda a=1.0, flag=False: 1 / (2.0 - a), "ZeroDivisionError"),
    ],
    ids=["recomputes", "ignores-its-controls", "raises-at-an-end"],
)
def test_drive_live_explorers_changes_each_control_and_reports_a_broken_explorer(monkeypatch, function, message):
    """Catches an explorer whose output does not depend on its controls and one that fails at a slider's end."""
    ipywidgets = pytest.importorskip("ipywidgets")  # a book dependency, absent from the compatibility leg

    monkeypatch.delenv("SAPO_LAB_BOOK", raising=False)
    explore = _explorer(function, a=ipywidgets.FloatSlider(value=1.0, min=0.0, max=2.0), flag=False)
    if message is None:
        report = explore.drive_live_explorers(expected=1)
        assert [(r["control"], r["changed"]) for r in report] == [("a", True), ("flag", True)]
        assert explore.LIVE_EXPLORERS[0].last_kwargs == {"a": 1.0, "flag": False}  # controls put back
    else:
        with pytest.raises(AssertionError, match=message):
            explore.drive_live_explorers(expected=1)
    with pytest.raises(AssertionError, match="expected 2"):
        explore.drive_live_explorers(expected=2)
    explore.LIVE_EXPLORERS.clear()
