"""The kernel-free explorers of chapters 5 and 7 (sapo_lab.viz.explore), read from the figure's own data.

Expected curves are computed here from the closed forms with ``math``, never by the library's gates.
"""

import importlib.util
import math

import numpy as np
import pytest
import torch

from sapo_lab import centered_soft_gate, gate_weight, ppo_clip_surrogate, update_coefficient
from sapo_lab.viz import explore

# plotly is one of the book's dependencies, which the compatibility leg (the package's lowest versions) leaves out
NEEDS_PLOTLY = pytest.mark.skipif(importlib.util.find_spec("plotly") is None, reason="needs plotly (the book's)")

TEMPERATURES = [0.5, 1.0, 1.05, 2.0, 4.0]
R = [0.0, 0.4, 0.9, 1.0, 1.3, 2.2, 3.0]
TOL = 1e-5                                      # the figure keeps five decimals


def _sigmoid(u: float) -> float:
    return 1.0 / (1.0 + math.exp(-u))


def _weight(r: float, tau: float) -> float:
    p = _sigmoid(tau * (r - 1))
    return 4 * p * (1 - p)


def _centered_objective(r: float, tau: float) -> float:
    return 4 / tau * _sigmoid(tau * (r - 1)) - 2 / tau


def _chapter_5_figure(initial=(1.0, 1.05)):
    r = torch.tensor(R, dtype=torch.float64)
    ppo = (ppo_clip_surrogate(r, 1.0) - 1, ppo_clip_surrogate(r, -1.0) + 1)
    return explore.temperature_explorer(r, centered_soft_gate, gate_weight, TEMPERATURES,
                                        ppo_references=ppo, initial=initial)


def _owned(slider) -> list[int]:
    """The trace indices a slider's steps restyle (the same for every step)."""
    owned = {tuple(step.args[1]) for step in slider.steps}
    assert len(owned) == 1, f"the steps of {slider.currentvalue.prefix!r} restyle different traces: {owned}"
    return list(owned.pop())


def _close(got, want) -> bool:
    return len(got) == len(want) and all(abs(g - w) <= TOL for g, w in zip(got, want, strict=True))


@NEEDS_PLOTLY
def test_chapter_5_has_a_slider_per_temperature_each_moving_only_its_own_side():
    """Catches one slider over every (tau_pos, tau_neg) pair, a slider that restyles every trace (it would
    reset the other side), and the tau_neg slider moving the A = +1 curves."""
    fig = _chapter_5_figure()
    assert [s.currentvalue.prefix for s in fig.layout.sliders] == ["τ<sub>pos</sub> = ", "τ<sub>neg</sub> = "]
    pos, neg = (_owned(s) for s in fig.layout.sliders)
    assert not set(pos) & set(neg)
    assert {fig.data[i].legendgroup for i in pos} == {"A = +1"}
    assert {fig.data[i].legendgroup for i in neg} == {"A = −1"}
    # each side: its objective on the upper panel and its weight on the lower one
    assert sorted(fig.data[i].yaxis for i in pos) == sorted(fig.data[i].yaxis for i in neg) == ["y", "y2"]
    untouched = [t.name for k, t in enumerate(fig.data) if k not in pos + neg]
    assert untouched == ["PPO, A = +1", "PPO, A = −1"]


@NEEDS_PLOTLY
@pytest.mark.parametrize("side", [0, 1], ids=["tau_pos", "tau_neg"])
def test_chapter_5_curves_at_every_step_are_the_closed_forms(side):
    """Catches the objective and weight swapped between panels, a side drawn with the other's sign, a step
    whose curves belong to another temperature, and rounding too coarse to draw w near r = 1."""
    fig = _chapter_5_figure()
    sign = (+1, -1)[side]
    slider = fig.layout.sliders[side]
    owned = _owned(slider)
    assert [float(step.label) for step in slider.steps] == TEMPERATURES
    for step in slider.steps:
        tau = float(step.label)
        curves = dict(zip((fig.data[i].yaxis for i in owned), step.args[0]["y"], strict=True))
        assert _close(curves["y2"], [_weight(r, tau) for r in R]), (tau, curves["y2"])
        assert _close(curves["y"], [sign * _centered_objective(r, tau) for r in R]), (tau, curves["y"])
        assert abs(curves["y2"][R.index(1.0)] - 1.0) <= TOL   # w_tau(1) = 1 at every temperature


@NEEDS_PLOTLY
def test_chapter_5_opens_on_the_curves_its_sliders_name():
    """Catches a page whose first drawn curves belong to another temperature than the handles show."""
    fig = _chapter_5_figure(initial=(2.0, 0.5))
    for slider, tau in zip(fig.layout.sliders, (2.0, 0.5), strict=True):
        assert slider.active == TEMPERATURES.index(tau)
        for i, y in zip(_owned(slider), slider.steps[slider.active].args[0]["y"], strict=True):
            assert list(fig.data[i].y) == list(y)


@NEEDS_PLOTLY
def test_chapter_5_ppo_references_are_told_apart():
    """Catches the two PPO references drawn in one style, whose flat parts then read as one line."""
    fig = _chapter_5_figure()
    ppo = [t for t in fig.data if t.name.startswith("PPO")]
    assert len(ppo) == 2 and all(t.yaxis == "y" and t.showlegend is not False for t in ppo)
    assert ppo[0].line.dash != ppo[1].line.dash and ppo[0].line.color != ppo[1].line.color
    assert {t.line.dash for t in ppo} <= {"dash", "dot", "dashdot", "longdash"}


def _direction(p_a: float, sign: int) -> list[float]:
    """A plain three-token softmax score: the sampled token and two that share 1 - p_a equally."""
    rest = (1 - p_a) / 2
    return [sign * (1 - p_a), -sign * rest, -sign * rest]


@NEEDS_PLOTLY
def test_chapter_7_has_a_tau_slider_for_the_height_and_a_p_a_slider_for_the_direction():
    """Catches a tau slider that does not reach the figure or that redraws the direction, and a height that is
    not r * w_tau(r) at the temperature its step names."""
    r = torch.tensor(R, dtype=torch.float64)
    p_values = [0.2, 0.5, 0.8]
    fig = explore.update_explorer(np.arange(3), _direction, p_values, r, update_coefficient, TEMPERATURES,
                                  initial_p=0.5)
    p_slider, tau_slider = fig.layout.sliders
    assert [p_slider.currentvalue.prefix, tau_slider.currentvalue.prefix] == ["p<sub>a</sub> = ", "τ = "]
    direction, height = _owned(p_slider), _owned(tau_slider)
    assert [fig.data[i].yaxis for i in direction] == ["y", "y"] and [fig.data[i].yaxis for i in height] == ["y2"]
    for step in tau_slider.steps:
        tau = float(step.label)
        assert _close(step.args[0]["y"][0], [r_ * _weight(r_, tau) for r_ in R]), tau
    for step, p_a in zip(p_slider.steps, p_values, strict=True):
        assert [list(y) for y in step.args[0]["y"]] == [pytest.approx(_direction(p_a, s)) for s in (+1, -1)]
    assert p_slider.active == 1 and tau_slider.active == TEMPERATURES.index(1.0)
    reference = [t for k, t in enumerate(fig.data) if k not in direction + height]
    assert [t.name for t in reference] == ["c = r (no gate)"] and list(reference[0].y) == R


def _figures():
    r = torch.linspace(0.0, 3.0, 31, dtype=torch.float64)
    single = explore.slider_figure(r, [0.5, 1.0], lambda t: [("w", gate_weight(r, t))], slider_label="tau",
                                   title="one slider")
    return {"chapter 5": _chapter_5_figure(), "slider_figure": single,
            "chapter 7": explore.update_explorer(np.arange(3), _direction, [0.2, 0.5], r, update_coefficient,
                                                 TEMPERATURES, initial_p=0.2)}


@NEEDS_PLOTLY
@pytest.mark.parametrize("name", ["chapter 5", "chapter 7", "slider_figure"])
def test_title_clears_the_modebar_and_sliders_span_the_plot(name):
    """Catches a title at plotly's default height (under the modebar's buttons on a phone), a slider sharing
    a row with another (half the width each), and sliders drawn on top of each other. The browser test
    measures the same on the rendered pages at 390 px."""
    fig = _figures()[name]
    layout = fig.layout
    assert layout.title.yref == "container" and layout.title.yanchor == "top"
    assert (1 - layout.title.y) * layout.height >= 30      # the modebar's strip is about 25 px tall
    assert layout.legend.orientation == "h" and layout.legend.y * layout.height <= layout.height - 30
    tops = []
    for slider in layout.sliders:
        assert (slider.x, slider.xanchor, slider.len, slider.lenmode) == (0, "left", 1, None)
        tops.append(slider.y)
    plot_height = layout.height - layout.margin.t - layout.margin.b
    assert all((a - b) * plot_height >= 80 for a, b in zip(tops, tops[1:], strict=False)), tops


@pytest.mark.parametrize(
    "entries, rows",
    [
        ([("x" * 10, None), ("y" * 10, None)], 1),                 # 105 + 105 px fit in 290
        ([("x" * 10, None), ("y" * 10, None), ("z" * 10, None)], 2),   # 315 px do not
        ([("a" * 10, "g"), ("b" * 10, "g"), ("c" * 10, "h"), ("d" * 10, "h")], 2),   # two groups side by side
        ([("τ<sub>pos</sub>" + "x" * 6, None), ("y" * 20, None)], 1),   # 105 + 170 px; the tags take no room
    ],
    ids=["fit", "wrap", "groups", "tags"],
)
def test_phone_legend_rows(entries, rows):
    """Catches a legend counted one row per entry (a tall empty band on a laptop), groups laid side by
    side entry by entry, and markup counted as text."""
    assert explore.phone_legend_rows(entries) == rows


@NEEDS_PLOTLY
def test_panel_figure_names_the_mistake():
    """Every mistake a chapter can make building an explorer is one line naming the slider or line."""
    line = explore.Line("w")
    panel = explore.Panel([0.0, 1.0])
    with pytest.raises(ValueError, match="slider tau: curves.*gave 2 curves for 1 lines"):
        explore.panel_figure([panel], [explore.TraceSlider("tau", [1.0], [line], lambda t: [[0, 1], [1, 0]])],
                             title="t")
    with pytest.raises(ValueError, match="initial value 3.0 is not one of its values"):
        explore.panel_figure([panel], [explore.TraceSlider("tau", [1.0], [line], lambda t: [[0, 1]], initial=3.0)],
                             title="t")
    with pytest.raises(ValueError, match="line 'w' is on panel 1; there are 1 panels"):
        explore.panel_figure([panel], [explore.TraceSlider("tau", [1.0], [explore.Line("w", 1)], lambda t: [[0, 1]])],
                             title="t")
