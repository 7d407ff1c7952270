"""The book build reads only the book: folders a user keeps beside it do not change or break it.

A tiny Jupyter Book (one page, nothing executed) is built with the page-selection settings of the real
``_config.yml`` (``only_build_toc_files`` and ``exclude_patterns``) next to planted folders: virtual
environments with a Markdown template in their site-packages (hidden, nested, and plainly named), a notes
folder and a run folder, each holding a page whose YAML front matter does not parse. With ``-W`` any of them
that Sphinx read would fail the build.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"

# Front matter that stops a build with "Malformed YAML" (a model-card template found in a real site-packages).
BROKEN_PAGE = "---\nname: {{ model_name }}\ntags: [unclosed\n---\n# Template\n"
PLANTED = (
    ".venv-bench/lib/python3.11/site-packages/pkg/templates/modelcard_template.md",
    ".env/lib/python3.11/site-packages/pkg/README.md",
    "framework_audit/.venv-x/lib/python3.11/site-packages/pkg/README.md",
    "venv/lib/python3.11/site-packages/pkg/README.md",
    "notes/todo.md",
    "runs/run1/report.md",
)


def _build(book: Path, exclude_patterns: list[str]) -> subprocess.CompletedProcess:
    config = {"title": "scope", "only_build_toc_files": CONFIG["only_build_toc_files"],
              "exclude_patterns": exclude_patterns, "execute": {"execute_notebooks": "off"}}
    (book / "_config.yml").write_text(yaml.safe_dump(config))
    (book / "_toc.yml").write_text("format: jb-book\nroot: index\n")
    (book / "index.md").write_text("# The book\n\nOnly this page is built.\n")
    for path in PLANTED:
        (book / path).parent.mkdir(parents=True, exist_ok=True)
        (book / path).write_text(BROKEN_PAGE)
    return subprocess.run([str(JUPYTER_BOOK), "build", str(book), "-W", "-n", "--keep-going"],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def jupyter_book():
    if not JUPYTER_BOOK.exists():
        pytest.skip(f"{JUPYTER_BOOK} is missing (make venv installs it)")


def test_planted_environments_notes_and_runs_do_not_reach_the_build(jupyter_book, tmp_path):
    # Catches exclude_patterns that miss hidden folders (a .venv-* beside the book) or any site-packages.
    proc = _build(tmp_path, CONFIG["exclude_patterns"])
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    html = tmp_path / "_build" / "html"
    built = sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html") if "_static" not in p.parts)
    assert built == ["genindex.html", "index.html", "search.html"], built


def test_the_planted_folders_break_a_build_without_those_exclusions(jupyter_book, tmp_path):
    # Without it the test above could pass because the planted page never mattered (e.g. a parser that
    # tolerates it). Only the hidden and site-packages patterns are dropped.
    kept = [p for p in CONFIG["exclude_patterns"] if not p.startswith((".", "**/.")) and "site-packages" not in p]
    proc = _build(tmp_path, kept)
    assert proc.returncode != 0 and "Malformed YAML" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
