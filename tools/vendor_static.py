"""Copy plotly.js and MathJax from installed packages into book/_static.

The rendered book then loads every script from its own files: it works offline,
and the browser test can run with networking off.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import mathjax  # from the django-static-mathjax package
import plotly

STATIC = Path(__file__).resolve().parents[1] / "book" / "_static"


def main() -> None:
    STATIC.mkdir(parents=True, exist_ok=True)
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    shutil.copy2(plotly_js, STATIC / "plotly.min.js")
    mathjax_es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    target = STATIC / "mathjax"
    if not (target / "tex-chtml.js").exists():
        shutil.copytree(mathjax_es5, target, dirs_exist_ok=True)
    print(f"vendored plotly.js and MathJax into {STATIC}")


if __name__ == "__main__":
    main()
