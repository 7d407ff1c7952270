"""Write the one Colab install cell into every notebook, its pins read from pyproject.toml.

    python tools/colab_cell.py          # rewrite the first code cell of each book/*.ipynb
    python tools/colab_cell.py --check  # exit 1 if any notebook's cell differs

tests/book/test_book.py compares every notebook's first code cell with :func:`colab_cell_source`.

The cell installs sapo_lab (from ``SAPO_LAB_REPOSITORY`` when set, else _config.yml's repository) with
``--no-deps`` and then the runtime dependencies except torch, so that a Colab runtime keeps its own CUDA
torch: resolving ``torch>=...`` could replace it with a multi-GB download. In the chapters that read
committed results (sapo_lab.book_data.CHAPTERS) it then calls ``chapter_data``, which fetches them when
the chapter runs outside the repository.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def runtime_requirements_except_torch() -> list[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in deps if not d.replace(" ", "").lower().startswith("torch")]


def repository_url() -> str:
    import yaml

    return yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]


LINE_LENGTH = 79      # the notebooks' line length (book/ruff.toml): the cell fits the book's column


def _continued(words: list[str], first: str, indent: str = " " * 8) -> str:
    """``first`` followed by ``words``, broken with IPython's backslash continuation to fit LINE_LENGTH."""
    lines, line = [], first
    for word in words:
        if len(line) + 1 + len(word) > LINE_LENGTH - 2 and line != first:
            lines.append(line + " \\")
            line = indent + word
        else:
            line += " " + word
    return "\n".join([*lines, line])


def _data_chapters() -> dict:
    sys.path.insert(0, str(ROOT))  # the checkout's sapo_lab, whatever the running environment holds
    from sapo_lab.book_data import CHAPTERS

    return CHAPTERS


def colab_cell_source(chapter: str | None = None) -> str:
    """The first code cell of ``chapter`` (a notebook stem): the install, then the fetch if it reads data."""
    pins = [f'"{d}"' for d in runtime_requirements_except_torch()]
    cell = (
        "# On Colab or a fresh kernel, install sapo_lab only if it is missing.\n"
        "# --no-deps keeps the runtime's own torch (a resolver could replace\n"
        "# Colab's CUDA build with a multi-GB download); the second install adds\n"
        "# sapo_lab's other dependencies, as pyproject.toml declares.\n"
        "# SAPO_LAB_REPOSITORY (a URL or a local clone) replaces the repository.\n"
        "import os\n"
        "\n"
        "try:\n"
        "    import sapo_lab\n"
        "except ImportError:\n"
        "    source = os.environ.get(\n"
        f'        "SAPO_LAB_REPOSITORY", "{repository_url()}"\n'
        "    )\n"
        '    if "://" not in source:\n'
        '        source = "file://" + os.path.abspath(source)\n'
        '    %pip install -q --no-deps "git+{source}"\n'
        + _continued(pins, "    %pip install -q") + "\n"
        "    import sapo_lab"
    )
    if chapter in _data_chapters():
        cell += (
            "\n"
            "# Outside the repository, fetch the committed results this chapter\n"
            "# reads into a local cache, once, each file checked by SHA-256.\n"
            "from sapo_lab.book_data import chapter_data\n"
            "\n"
            f'data_root = chapter_data("{chapter}")'
        )
    return cell


def first_code_cell(nb: dict) -> dict:
    return next(c for c in nb["cells"] if c["cell_type"] == "code")


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        wanted = colab_cell_source(path.stem)
        nb = json.loads(path.read_text())
        cell = first_code_cell(nb)
        if "".join(cell["source"]) == wanted:
            continue
        stale.append(path.name)
        if not check:
            cell["source"] = wanted.splitlines(keepends=True)
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    if check and stale:
        print(f"Colab cell differs from pyproject.toml in: {', '.join(stale)}; run python tools/colab_cell.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
