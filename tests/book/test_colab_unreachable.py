"""A chapter opened alone with an unreachable data source stops at its first cell, in one line naming it.

The cell is the chapter's own first cell (tools/colab_cell.py), run by a Jupyter kernel in an empty
folder, so the test sees what a Colab reader sees: the error output, not a Python traceback.
"""

from pathlib import Path

import pytest

# a notebook kernel, absent from the compatibility leg's environment
nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed here")
pytest.importorskip("nbclient", reason="nbclient is not installed here")
from nbclient import NotebookClient  # noqa: E402
from nbclient.exceptions import CellExecutionError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_an_unreachable_source_stops_the_first_cell_with_one_line(tmp_path, monkeypatch):
    nb = nbformat.read(ROOT / "book" / "10c_conformance_audit.ipynb", as_version=4)
    nb.cells = [next(c for c in nb.cells if c.cell_type == "code")]
    gone = tmp_path / "moved-away"
    monkeypatch.setenv("SAPO_LAB_REPOSITORY", str(gone))
    monkeypatch.setenv("SAPO_LAB_CACHE", str(tmp_path / "cache"))
    client = NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    with pytest.raises(CellExecutionError):
        client.execute()
    (error,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    # one line, naming the source: catches a bare traceback, or a message that hides where it fetched from
    assert len(error.traceback) == 1 and "\n" not in error.traceback[0], error.traceback
    assert error.traceback[0].startswith(f"BookDataError: cannot fetch the book's data from {gone.as_uri()}")
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.json"))
