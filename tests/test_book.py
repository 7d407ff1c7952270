"""Static checks on the book's sources: table of contents, preambles, committed notebooks."""

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def toc_files():
    files = [TOC["root"]]
    for part in TOC["parts"]:
        assert part.get("caption"), "every part of the table of contents has a caption"
        for chapter in part["chapters"]:
            files.append(chapter["file"])
            files += [s["file"] for s in chapter.get("sections", [])]  # e.g. 10b under chapter 10
    return files


def test_every_toc_entry_exists_and_every_notebook_is_listed():
    listed = toc_files()
    assert all((ROOT / f"{f}.ipynb").exists() for f in listed), listed
    assert {f"book/{p.stem}" for p in NOTEBOOKS} == set(listed)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_colab_preamble_from_the_configured_repository(path):
    nb = json.loads(path.read_text())
    first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    source = "".join(first_code["source"])
    assert "import sapo_lab" in source and "except ImportError" in source
    url = re.search(r"git\+(\S+?)\"", source).group(1)
    assert url == CONFIG["repository"]["url"], "the Colab preamble installs from the repository set in _config.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_without_outputs_and_assert_something(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)
    assert sum("assert " in "".join(c["source"]) for c in code) >= 1
    assert sum(c["cell_type"] == "markdown" and "".join(c["source"]).startswith("# ") for c in nb["cells"]) == 1


def test_config_builds_offline():
    sphinx = CONFIG["sphinx"]["config"]
    assert sphinx["mathjax_path"].startswith("mathjax/") and "plotly.min.js" in sphinx["html_js_files"]
    assert sphinx["nb_ipywidgets_js"] == {}
    assert CONFIG["only_build_toc_files"] is True and CONFIG["execute"]["timeout"] > 0
