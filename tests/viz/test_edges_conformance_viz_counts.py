"""Figures tried away from their defaults: a slider opening on its last position, and a panel count that does not
fill the last row of the grid."""

import importlib.util
import json

import pytest

from sapo_lab.viz.plots import plot_training_curves

NEEDS_PLOTLY = pytest.mark.skipif(importlib.util.find_spec("plotly") is None, reason="needs plotly (the book's)")


@NEEDS_PLOTLY
def test_slider_figure_opens_on_its_initial_position():
    """Catches the first position's curves drawn whatever ``initial_index`` says: three positions of one curve
    each, opened on position 2, show trace 2 only (and the slider's handle stands there)."""
    from sapo_lab.viz.explore import slider_figure

    fig = slider_figure([0.0, 1.0], [1, 2, 3], lambda v: [("a", [v, v])], slider_label="v", initial_index=2)
    assert [bool(t.visible) for t in fig.data] == [False, False, True]
    assert fig.layout.sliders[0].active == 2


def test_training_curves_keep_a_panel_on_a_short_last_row(tmp_path):
    """Catches the grid's row count rounded down: 4 panels in 3 columns need 2 rows (6 axes, the last two blank);
    one row would hold 3 axes and drop the fourth panel, here dev Pass@1."""
    rows = [{"step": s, "rollout/reward_mean": s / 10, "eval/dev_pass1": s / 20} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    panels = (("rollout/reward_mean", "reward"), ("rollout/reward_mean", "again"),
              ("rollout/reward_mean", "third"), ("eval/dev_pass1", "dev Pass@1"))
    fig = plot_training_curves({"run": str(tmp_path)}, panels=panels, ncols=3)
    assert len(fig.axes) == 6
    assert [ax.get_title() for ax in fig.axes] == ["reward", "again", "third", "dev Pass@1", "", ""]
    assert [ax.axison for ax in fig.axes] == [True, True, True, True, False, False]
