"""Explorers for the book: live ipywidgets in a kernel, plotly sliders in the static HTML.

A notebook calls :func:`slider_figure` to precompute one set of curves per slider
value, then :func:`show_figure` to display it, and :func:`live_explorer` to add the
ipywidgets version. When the book is built (``SAPO_LAB_BOOK=1``, set by the
Makefile) figures are written as plain HTML that relies on the ``plotly.min.js``
served from the book's own ``_static`` folder, and widgets are replaced by a note,
since nothing can recompute them without a kernel.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

BOOK_ENV = "SAPO_LAB_BOOK"


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
    fig.update_layout(
        title=title, xaxis_title=xaxis_title, yaxis_title=yaxis_title, template="plotly_white",
        sliders=[dict(active=initial_index, currentvalue=dict(prefix=f"{slider_label} = "), steps=steps, pad=dict(t=40))],
        margin=dict(l=60, r=20, t=60, b=40), height=460,
    )
    if yaxis_range is not None:
        fig.update_yaxes(range=list(yaxis_range))
    return fig


def show_figure(fig) -> None:
    """Display a plotly figure: page-embedded HTML in the book build, the default renderer elsewhere."""
    from IPython.display import HTML, display

    if in_book_build():
        display(HTML(fig.to_html(include_plotlyjs=False, full_html=False,
                                 config={"displaylogo": False, "responsive": True})))
    else:
        fig.show()


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
