"""Each slider position of ``slider_figure`` shows exactly its own curves and the static ones."""
import importlib.util

import pytest

from sapo_lab.viz.explore import slider_figure


# plotly is one of the book's dependencies, which the compatibility leg (the package's lowest versions) leaves out
@pytest.mark.skipif(importlib.util.find_spec("plotly") is None, reason="needs plotly (the book's)")
def test_each_position_shows_only_its_own_curves_and_the_static_ones():
    """Catches an off-by-one in the visibility mask (``<=`` for ``<``): position i would also show position
    i + 1's first curve. Three positions of two curves each, plus one static curve: 7 traces; position i
    shows traces 2i and 2i + 1 and the static trace 6 (worked out by hand)."""
    x = [0.0, 1.0]
    fig = slider_figure(x, [1, 2, 3], lambda v: [("a", [v, v]), ("b", [2 * v, 2 * v])], slider_label="v",
                        static_traces=[("ref", [0.0, 0.0])])
    masks = [step["args"][0]["visible"] for step in fig.layout.sliders[0].steps]
    assert masks == [
        [True, True, False, False, False, False, True],
        [False, False, True, True, False, False, True],
        [False, False, False, False, True, True, True],
    ]
    # the figure opens on position 0: its own two curves and the static one
    assert [bool(t.visible) if t.visible is not None else True for t in fig.data] == masks[0]
