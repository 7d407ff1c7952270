"""No display equation of the book is wider than the text column, estimated from its TeX.

The browser test (tests/book/test_browser.py) measures the rendered equations; this test needs no
browser and fails as soon as a long display equation is written. A line's width is estimated in
glyphs: a command counts as one glyph, braces, sub/superscript marks, spacing commands and
alignment marks count as none, and an ``\\underbrace``'s label (set below its term) is dropped.
Lines are split at ``\\\\``. Calibration on the rendered book at a 1280 px window (both
sidebars): the seven equations a reader's walk found cut at the column edge estimate 49 to 70
glyphs, and one that fitted may estimate as much as 49: the estimate is rough by a couple of
glyphs, so the limit, 46, keeps a margin below the narrowest cut equation.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 46  # glyphs per display line, with a margin below the narrowest cut equation (49)

DISPLAY = re.compile(r"\$\$(.+?)\$\$|```\{math\}(.+?)```", re.S)
SPACING = re.compile(r"\\(left|right|[bB]ig[lr]?|mathrm|operatorname|text|mathbf|rm|quad|qquad|displaystyle)\b|\\[,;!: ]")


def estimated_width(line: str) -> int:
    """Glyphs of one display line of TeX (see the module docstring)."""
    t = re.sub(r"\\(begin|end)\{[a-z*]+\}", "", line)
    t = re.sub(r"_\{\\text\{[^{}]*\}\}", "", t)  # an underbrace's label
    t = SPACING.sub(" ", t)
    t = re.sub(r"\\(frac|tfrac|dfrac|underbrace|widehat|hat|bar|tilde)\b", "", t)
    t = re.sub(r"\\[a-zA-Z]+", "x", t)
    return len(re.sub(r"[{}_^\s&]", "", t))


def display_equations():
    for path in sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md")):
        if path.suffix == ".ipynb":
            cells = json.loads(path.read_text())["cells"]
            texts = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
        else:
            texts = [path.read_text()]
        for text in texts:
            for m in DISPLAY.finditer(text):
                yield path.name, (m.group(1) or m.group(2)).strip()


def test_no_display_line_is_wider_than_the_column():
    too_wide = [
        f"{name}: {width} glyphs: {line.strip()[:80]}"
        for name, tex in display_equations()
        for line in re.split(r"\\\\", tex)
        if (width := estimated_width(line)) > LIMIT
    ]
    assert not too_wide, "display equations wider than the column:\n" + "\n".join(too_wide)


@pytest.mark.parametrize(
    "tex, wide",
    [
        # chapter 2's score-function identity on one line: cut at 1280 px
        (r"\nabla_\theta J=\sum_y R(y)\,\nabla_\theta\pi_\theta(y)=\sum_y \pi_\theta(y)\,R(y)\,"
         r"\nabla_\theta\log\pi_\theta(y)=\mathbb{E}_{y\sim\pi_\theta}\bigl[R(y)\,\nabla_\theta\log\pi_\theta(y)\bigr].",
         True),
        # the same identity broken with aligned: fits
        (r"\begin{aligned}\nabla_\theta J&=\sum_y R(y)\,\nabla_\theta\pi_\theta(y)=\sum_y \pi_\theta(y)\,R(y)\,"
         r"\nabla_\theta\log\pi_\theta(y)\\&=\mathbb{E}_{y\sim\pi_\theta}\bigl[R(y)\,\nabla_\theta\log\pi_\theta(y)\bigr]."
         r"\end{aligned}", False),
        # chapter 9's decomposition: the underbraces' labels sit below, so it fits
        (r"\frac1T\sum_t g_th_t-g_\tau(\mu)\,\bar h=\underbrace{\frac1T\sum_t(g_t-\bar g)\,h_t}_{\text{covariance term}}"
         r"+\underbrace{(\bar g-g_\tau(\mu))\,\bar h}_{\text{scalar-gap term}} .", False),
    ],
)
def test_the_estimate_tells_a_cut_equation_from_one_that_fits(tex, wide):
    assert (max(estimated_width(line) for line in re.split(r"\\\\", tex)) > LIMIT) == wide
