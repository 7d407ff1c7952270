"""Explorers for the book: live ipywidgets in a kernel, plotly sliders in the static HTML.

A notebook calls :func:`slider_figure` to precompute one set of curves per slider
value (or :func:`panel_figure` for stacked panels with one slider per temperature),
then :func:`show_figure` to display it, and :func:`live_explorer` to add the
ipywidgets version. When the book is built (``SAPO_LAB_BOOK=1``, set by the
Makefile) figures are written as plain HTML that relies on the ``plotly.min.js``
served from the book's own ``_static`` folder, and widgets are replaced by a note,
since nothing can recompute them without a kernel.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

BOOK_ENV = "SAPO_LAB_BOOK"

# Vertical room, in px, of the parts of a figure drawn outside its plot area. The title sits below the
# modebar's strip, so that at a phone's width (where the modebar spans most of the figure) it is never under
# a button; the legend below it gets as many rows as it wraps to on a phone.
MODEBAR_PX = 38
TITLE_PX = 26
LEGEND_ROW_PX = 24
# A horizontal legend wraps at the plot area's width: about 288 px in the book's column on a 390 px phone.
# An entry takes its symbol's width and about 6.5 px a character (plotly's 12 px font). Should the legend
# need more rows than reserved, plotly moves the plot area down (it never draws over it), so the estimate
# errs short rather than leave an empty band on a laptop.
PHONE_LEGEND_WIDTH_PX = 290
LEGEND_SYMBOL_PX, LEGEND_CHAR_PX = 40, 6.5
AXIS_PX = 52            # tick labels and an x-axis title under a panel
SLIDER_PX = 92          # a slider's current value, rail and step labels
MARGIN_LEFT, MARGIN_RIGHT = 58, 12
# Buttons a reader of a line plot does not need: fewer buttons, a shorter modebar on a phone.
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True,
                 "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"]}


@dataclass
class LiveExplorer:
    """A live explorer created in this kernel, with a record of its calls (tests drive it by changing controls)."""

    name: str
    widget: object                       # the ipywidgets.interactive holding the controls
    calls: int = 0
    last_kwargs: dict = field(default_factory=dict)
    last_result: object = None
    error: str | None = None             # ipywidgets only prints a callback's exception; keep it for tests


LIVE_EXPLORERS: list[LiveExplorer] = []


def in_book_build() -> bool:
    """True while the book is built (SAPO_LAB_BOOK=1): figures embed as HTML using the page's plotly.js."""
    return os.environ.get(BOOK_ENV) == "1"


def slider_figure(x, values: Sequence, curves: Callable, *, slider_label: str, title: str = "",
                  xaxis_title: str = "", yaxis_title: str = "", initial_index: int = 0,
                  static_traces: Sequence = (), yaxis_range=None, mode: str = "lines",
                  labels: Sequence[str] | None = None):
    """A plotly figure with one slider position per entry of ``values``.

    ``curves(value) -> list[(name, y)]`` gives the curves drawn at that slider value;
    every position must return the same number of curves. ``static_traces`` are
    ``(name, y)`` pairs shown at every position (e.g. a reference curve). ``labels``
    names the slider positions (default: the values themselves).
    """
    if labels is not None and len(labels) != len(values):
        raise ValueError("labels must have one entry per slider value")
    import plotly.graph_objects as go

    fig = go.Figure()
    per_step = None
    for i, v in enumerate(values):
        named = list(curves(v))
        if per_step is None:
            per_step = len(named)
        elif len(named) != per_step:
            raise ValueError("curves(value) must return the same number of curves for every value")
        for name, y in named:
            fig.add_trace(go.Scatter(x=list(map(float, x)), y=[float(t) for t in y], name=name, mode=mode,
                                     visible=(i == initial_index)))
    for name, y in static_traces:
        fig.add_trace(go.Scatter(x=list(map(float, x)), y=[float(t) for t in y], name=name, mode="lines",
                                 line=dict(dash="dot", color="gray")))
    n_dynamic = per_step * len(values)
    steps = []
    for i, v in enumerate(values):
        visible = [i * per_step <= k < (i + 1) * per_step for k in range(n_dynamic)] + [True] * len(static_traces)
        if labels is not None:
            label = labels[i]
        else:
            label = f"{v:g}" if isinstance(v, (int, float)) else str(v)
        steps.append(dict(method="restyle", args=[{"visible": visible}], label=label))
    plot_height = 300
    fig.update_layout(
        xaxis_title=xaxis_title, yaxis_title=yaxis_title,
        sliders=[_slider_layout(slider_label, steps, initial_index, 0, plot_height)],
    )
    legend = [(name, None) for name, _ in named] + [(name, None) for name, _ in static_traces]
    _phone_safe_layout(fig, title, plot_height, n_sliders=1, legend_rows=phone_legend_rows(legend))
    if yaxis_range is not None:
        fig.update_yaxes(range=list(yaxis_range))
    return fig


def _slider_layout(label: str, steps: list, active: int, position: int, plot_height: int) -> dict:
    """The ``position``-th slider under the plot area, as wide as the plot area (never beside another)."""
    top_px = AXIS_PX + position * SLIDER_PX
    return dict(active=active, currentvalue=dict(prefix=f"{label} = "), steps=steps,
                x=0, xanchor="left", len=1, y=-top_px / plot_height, yanchor="top", pad=dict(t=30, l=0, r=0))


def phone_legend_rows(entries: Sequence[tuple[str, str | None]]) -> int:
    """Rows a horizontal legend of ``(name, group)`` entries takes on a phone.

    Plotly lays a group's entries out one under another and places groups (an entry without a group is
    one on its own) side by side, starting a new line when the next would pass the wrap width.
    """
    units: dict = {}
    for k, (name, group) in enumerate(entries):
        width = LEGEND_SYMBOL_PX + LEGEND_CHAR_PX * len(re.sub(r"<[^>]*>", "", name))
        key = group if group is not None else ("entry", k)
        rows, widest = units.get(key, (0, 0.0))
        units[key] = (rows + 1, max(widest, width))
    total, line_rows, line_width = 0, 0, 0.0
    for rows, width in units.values():
        if line_width and line_width + width > PHONE_LEGEND_WIDTH_PX:
            total, line_rows, line_width = total + line_rows, 0, 0.0
        line_rows, line_width = max(line_rows, rows), line_width + width
    return total + line_rows


def _phone_safe_layout(fig, title: str, plot_height: int, n_sliders: int, legend_rows: int) -> None:
    """Title under the modebar's strip, a horizontal legend under it, sliders under the plot area.

    A legend beside the plot takes a third of a phone's width from the plot and its sliders; a title at
    the default height sits under the modebar's buttons there.
    """
    top = MODEBAR_PX + TITLE_PX + LEGEND_ROW_PX * legend_rows + 10
    bottom = AXIS_PX + n_sliders * SLIDER_PX
    height = top + plot_height + bottom
    fig.update_layout(
        template="plotly_white", height=height,
        margin=dict(l=MARGIN_LEFT, r=MARGIN_RIGHT, t=top, b=bottom),
        title=dict(text=title, x=0, xref="container", xanchor="left", y=1 - MODEBAR_PX / height,
                   yref="container", yanchor="top", pad=dict(l=10), font=dict(size=16)),
        legend=dict(orientation="h", x=0, xref="container", xanchor="left",
                    y=1 - (MODEBAR_PX + TITLE_PX) / height, yref="container", yanchor="top"),
    )


@dataclass(frozen=True)
class Line:
    """How one curve is drawn: legend name, panel (0 is the top one), colour, dash and legend group.

    Lines that share ``group`` show and hide together when the legend is clicked; ``legend=False``
    keeps a second panel's copy of a line out of the legend.
    """

    name: str
    panel: int = 0
    color: str | None = None
    dash: str = "solid"
    legend: bool = True
    group: str | None = None
    mode: str = "lines"


@dataclass(frozen=True)
class Panel:
    """One plot area of a :func:`panel_figure`; panels are stacked top to bottom."""

    x: Sequence
    yaxis_title: str = ""
    xaxis_title: str = ""
    yaxis_range: Sequence | None = None


@dataclass(frozen=True)
class TraceSlider:
    """A slider that redraws only its own lines: ``curves(value)`` gives one y sequence per line."""

    label: str
    values: Sequence
    lines: Sequence[Line]
    curves: Callable
    initial: object = None          # the value shown first (default: the first value)
    labels: Sequence[str] | None = None


def _numbers(values) -> list[float]:
    # Five decimals keep the page small; no curve of the book needs more to be drawn.
    return [round(float(v), 5) for v in values]


def _scatter(line: Line, x, y, visible: bool = True):
    import plotly.graph_objects as go

    return go.Scatter(x=_numbers(x), y=_numbers(y), name=line.name, mode=line.mode,
                      line=dict(color=line.color, dash=line.dash), showlegend=line.legend,
                      legendgroup=line.group, visible=visible,
                      xaxis=f"x{line.panel + 1 if line.panel else ''}",
                      yaxis=f"y{line.panel + 1 if line.panel else ''}")


def _slider_curves(slider: TraceSlider, value) -> list:
    curves = list(slider.curves(value))
    if len(curves) != len(slider.lines):
        raise ValueError(f"slider {slider.label}: curves({value!r}) gave {len(curves)} curves "
                         f"for {len(slider.lines)} lines")
    return curves


def panel_figure(panels: Sequence[Panel], sliders: Sequence[TraceSlider], *, title: str,
                 references: Sequence = (), panel_height: int = 220):
    """Stacked panels, each slider redrawing only its own lines (plotly's restyle of chosen traces).

    Two temperatures get two sliders this way, each moving its own side, instead of one slider over
    every pair. ``references`` are ``(Line, y)`` pairs drawn at every position. Sliders are stacked
    under the panels, each as wide as the plot area, so that each stays usable on a phone.
    """
    import plotly.graph_objects as go

    if not panels:
        raise ValueError("panel_figure needs at least one panel")
    for line in [ln for s in sliders for ln in s.lines] + [ln for ln, _ in references]:
        if not 0 <= line.panel < len(panels):
            raise ValueError(f"line {line.name!r} is on panel {line.panel}; there are {len(panels)} panels")
    fig = go.Figure()
    layout_sliders = []
    plot_height = len(panels) * panel_height + (len(panels) - 1) * AXIS_PX
    for position, slider in enumerate(sliders):
        if slider.labels is not None and len(slider.labels) != len(slider.values):
            raise ValueError(f"slider {slider.label}: labels must have one entry per value")
        values = list(slider.values)
        if slider.initial is not None and slider.initial not in values:
            raise ValueError(f"slider {slider.label}: its initial value {slider.initial!r} is not one of its values")
        active = 0 if slider.initial is None else values.index(slider.initial)
        first = len(fig.data)
        for line, y in zip(slider.lines, _slider_curves(slider, values[active]), strict=True):
            fig.add_trace(_scatter(line, panels[line.panel].x, y))
        owned = list(range(first, len(fig.data)))
        steps = []
        for i, value in enumerate(values):
            ys = [_numbers(y) for y in _slider_curves(slider, value)]
            label = slider.labels[i] if slider.labels is not None else f"{value:g}"
            steps.append(dict(method="restyle", args=[{"y": ys}, owned], label=label))
        layout_sliders.append(_slider_layout(slider.label, steps, active, position, plot_height))
    for line, y in references:
        fig.add_trace(_scatter(line, panels[line.panel].x, y))
    _stack_axes(fig, panels, panel_height, plot_height)
    fig.update_layout(sliders=layout_sliders)
    lines = [ln for s in sliders for ln in s.lines] + [ln for ln, _ in references]
    legend = [(ln.name, ln.group) for ln in lines if ln.legend]
    _phone_safe_layout(fig, title, plot_height, n_sliders=len(sliders), legend_rows=phone_legend_rows(legend))
    return fig


def _stack_axes(fig, panels: Sequence[Panel], panel_height: int, plot_height: int) -> None:
    """One x and y axis per panel, top to bottom, with room for each panel's x-axis title between them."""
    for k, panel in enumerate(panels):
        suffix = str(k + 1) if k else ""
        top = k * (panel_height + AXIS_PX)
        domain = [1 - (top + panel_height) / plot_height, 1 - top / plot_height]
        fig.update_layout({
            f"xaxis{suffix}": dict(title=dict(text=panel.xaxis_title), anchor=f"y{suffix}"),
            f"yaxis{suffix}": dict(title=dict(text=panel.yaxis_title), domain=domain, anchor=f"x{suffix}",
                                   range=None if panel.yaxis_range is None else list(panel.yaxis_range)),
        })


def show_figure(fig) -> None:
    """Display a plotly figure: page-embedded HTML in the book build, the default renderer elsewhere."""
    from IPython.display import HTML, display

    if in_book_build():
        display(HTML(fig.to_html(include_plotlyjs=False, full_html=False, config=PLOTLY_CONFIG)))
    else:
        fig.show(config=PLOTLY_CONFIG)


def live_explorer(function: Callable, **controls):
    """``ipywidgets.interact(function, **controls)`` in a live kernel; a note in the static book.

    Each explorer is also appended to :data:`LIVE_EXPLORERS` with a count of its calls, the latest arguments
    and result, and any exception, so that a test can change a control and check that the output recomputed.
    """
    from IPython.display import Markdown, display

    if in_book_build():
        display(Markdown("*Live sliders appear here when this notebook runs in Jupyter or Colab; "
                         "the slider figure above works in this page without a kernel.*"))
        return None
    import ipywidgets

    record = LiveExplorer(name=getattr(function, "__name__", "explorer"), widget=None)

    @functools.wraps(function)
    def recorded(**kwargs):
        record.calls += 1
        record.last_kwargs = dict(kwargs)
        try:
            record.last_result = function(**kwargs)
        except Exception as exc:
            record.error = f"{type(exc).__name__}: {exc}"
            raise
        return record.last_result

    shown = ipywidgets.interact(recorded, **controls)
    record.widget = shown.widget
    LIVE_EXPLORERS.append(record)
    return shown


def _other_value(control):
    """A value of ``control`` other than its current one: a slider's far end, another option, or not."""
    if hasattr(control, "max"):
        return control.max if control.value != control.max else control.min
    if hasattr(control, "options"):
        values = [o[1] if isinstance(o, tuple) else o for o in control.options]
        return next(v for v in values if v != control.value)
    return not control.value


def drive_live_explorers(expected: int) -> list[dict]:
    """Change every control of every live explorer of this kernel once, then put it back.

    Fails (AssertionError naming the explorer and control) when a chapter did not create
    ``expected`` explorers, when a change does not recompute the output, when the callback
    raises, when it receives another value than the control holds, or when an explorer that
    returns its numbers returns the same ones. In the book build no explorer is created
    (there is no kernel to recompute them) and nothing is driven. Returns one record per
    control: explorer, control, whether it returns numbers and whether they changed.
    """
    if in_book_build():
        return []
    assert len(LIVE_EXPLORERS) == expected, f"{len(LIVE_EXPLORERS)} live explorers, expected {expected}"
    report = []
    for explorer in LIVE_EXPLORERS:
        assert explorer.error is None and explorer.calls >= 1, (explorer.name, explorer.error, explorer.calls)
        for control in explorer.widget.kwargs_widgets:
            name, old = control._kwarg, control.value
            calls, before = explorer.calls, repr(explorer.last_result)
            control.value = _other_value(control)
            assert explorer.calls == calls + 1, f"{explorer.name}: changing {name} did not recompute"
            assert explorer.error is None, f"{explorer.name}({name}={control.value}): {explorer.error}"
            assert explorer.last_kwargs[name] == control.value, f"{explorer.name}: {name} did not reach the callback"
            returns = explorer.last_result is not None
            changed = repr(explorer.last_result) != before
            assert changed or not returns, f"{explorer.name}: changing {name} left its numbers unchanged"
            report.append(dict(explorer=explorer.name, control=name, returns=returns, changed=changed))
            control.value = old
    return report


# Chapter colours: one per advantage sign, the PPO references a darker shade of their side's colour.
SIGN_COLOURS = {+1: "#1f77b4", -1: "#ff7f0e"}
PPO_STYLES = {+1: ("#1a3f73", "dash"), -1: ("#a0522d", "dot")}
SIGN_NAMES = {+1: "A = +1", -1: "A = −1"}


def temperature_explorer(r, objective: Callable, weight: Callable, temperatures: Sequence[float], *,
                         ppo_references: Sequence, initial: tuple[float, float] = (1.0, 1.05)):
    """Chapter 5's kernel-free explorer: a slider for each temperature, each moving its own side.

    The upper panel is the signed objective ``A * objective(r, tau)`` with PPO's clipped objective
    for the same sign (``ppo_references``: the A = +1 and A = -1 curves, dashed and dotted); the
    lower panel is the gate weight ``weight(r, tau)``, the slope of the curve above it. The
    tau_pos slider redraws the A = +1 curves of both panels, the tau_neg slider the A = -1 ones.
    """
    def side(sign: int, label: str, start: float) -> TraceSlider:
        name = SIGN_NAMES[sign]
        return TraceSlider(
            label, list(temperatures),
            [Line(f"SAPO, {name}", 0, SIGN_COLOURS[sign], group=name),
             Line(f"w, {name}", 1, SIGN_COLOURS[sign], legend=False, group=name)],
            lambda tau: [sign * objective(r, tau), weight(r, tau)], initial=start)

    references = [(Line(f"PPO, {SIGN_NAMES[sign]}", 0, *PPO_STYLES[sign], group=SIGN_NAMES[sign]), y)
                  for sign, y in zip((+1, -1), ppo_references, strict=True)]
    return panel_figure(
        [Panel(r, yaxis_title="A × objective", yaxis_range=(-2.2, 2.2)),
         Panel(r, yaxis_title="gate weight w", xaxis_title="ratio r", yaxis_range=(0, 1.05))],
        [side(+1, "τ<sub>pos</sub>", initial[0]), side(-1, "τ<sub>neg</sub>", initial[1])],
        references=references, title="SAPO's objective and gate weight")


def update_explorer(tokens, direction: Callable, p_values: Sequence[float], r, coefficient: Callable,
                    temperatures: Sequence[float], *, initial_p: float, initial_tau: float = 1.0):
    """Chapter 7's kernel-free explorer: a logit update's direction (upper panel) and height (lower).

    ``direction(p_a, A)`` is the per-token ascent direction at r = 1 for each sign of A, moved by a
    p_a slider; ``coefficient(r, tau)`` is SAPO's common height c_tau(r) = r w_tau(r), moved by a
    tau slider and drawn against c = r, what the update would be with no gate.
    """
    markers = "lines+markers"
    return panel_figure(
        [Panel(tokens, yaxis_title="direction", xaxis_title="token (0 = sampled)", yaxis_range=(-1, 1)),
         Panel(r, yaxis_title="height c", xaxis_title="ratio r", yaxis_range=(0, 4))],
        [TraceSlider("p<sub>a</sub>", list(p_values),
                     [Line(SIGN_NAMES[s], 0, SIGN_COLOURS[s], mode=markers) for s in (+1, -1)],
                     lambda p_a: [direction(p_a, +1), direction(p_a, -1)], initial=initial_p),
         TraceSlider("τ", list(temperatures), [Line("c = r w<sub>τ</sub>(r)", 1, "#2ca02c")],
                     lambda tau: [coefficient(r, tau)], initial=initial_tau)],
        references=[(Line("c = r (no gate)", 1, "gray", "dot"), r)],
        title="A logit update: direction × height")
