"""Static checks on the book's sources: table of contents, preambles, committed notebooks."""

import json
import re
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def toc_files():
    files = [TOC["root"]]
    for part in TOC["parts"]:
        assert part.get("caption"), "every part of the table of contents has a caption"
        for chapter in part["chapters"]:
            files += [chapter["file"]] + [section["file"] for section in chapter.get("sections", [])]
    return files


def test_every_toc_entry_exists_and_every_notebook_is_listed():
    listed = toc_files()
    missing = [f for f in listed if not (ROOT / f"{f}.ipynb").exists() and not (ROOT / f"{f}.md").exists()]
    assert not missing, missing
    assert {f"book/{p.stem}" for p in NOTEBOOKS} <= set(listed)
    pages = sorted((ROOT / "book").glob("*.md"))
    assert {f"book/{p.stem}" for p in pages} <= set(listed), "a page under book/ is missing from _toc.yml"


def _markdown(path):
    if path.suffix == ".md":
        return path.read_text()
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown")


BIB_KEYS = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "references.bib").read_text(), re.M))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_chapter_cites_the_bibliography_and_keeps_no_hand_written_references(path):
    text = _markdown(path)
    keys = set(re.findall(r"\{cite:[pt]\}`([^`]+)`", text))
    assert keys, f"{path.name} cites nothing with {{cite}}"
    assert keys <= BIB_KEYS, f"unknown bibliography keys: {keys - BIB_KEYS}"
    # a hand-typed "(Gao et al., 2025)" or "Zhou (2026)" is a citation the bibliography does not link
    assert not re.search(r"Gao et al\.,? \(?2025|Zhou,? \(?2026", text), "hand-written citation left in the text"


EXERCISE_START = re.compile(r"```\{exercise-start\}[^\n]*\n:label: (\S+)")


def test_exercises_have_unique_labels_difficulty_and_collapsed_solutions():
    labels = []
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        text = _markdown(path)
        found = EXERCISE_START.findall(text) + re.findall(r":::\{exercise\}[^\n]*\n:label: (\S+)", text)
        labels += found
        for label in found:
            block = text[text.index(f":label: {label}"):][:3000]
            assert "*Difficulty " in block.split("exercise-end")[0], f"{label} has no difficulty mark"
            sol = re.search(r"\{solution(?:-start)?\} " + re.escape(label) + r"\n:class: dropdown", text)
            assert sol, f"{label} has no collapsed (dropdown) solution"
        for c in nb["cells"]:
            tags = c["metadata"].get("tags", [])
            if "solution" in tags and c["cell_type"] == "code":
                assert "assert " not in "".join(c["source"]), "asserts belong in the check cell, kept for students"
    assert len(labels) == len(set(labels)), "duplicate exercise labels"
    chapters_with_exercises = {int(label.split("-")[1]) for label in labels if label.split("-")[1].isdigit()}
    assert set(range(2, 12)) <= chapters_with_exercises | {16}, "every chapter 2-11 has exercises of its own"
    assert len(labels) >= 25


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_install_cell_is_collapsed_not_deleted(path):
    nb = json.loads(path.read_text())
    first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    assert "hide-cell" in first_code["metadata"].get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_colab_preamble_from_the_configured_repository(path):
    nb = json.loads(path.read_text())
    first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    source = "".join(first_code["source"])
    assert "import sapo_lab" in source and "except ImportError" in source
    default = re.search(r'"SAPO_LAB_REPOSITORY", "(\S+?)"', source).group(1)
    assert default == CONFIG["repository"]["url"], "the Colab preamble installs from the repository set in _config.yml"
    assert 'git+{source}"' in source, "the install line uses the source the environment variable may replace"


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


def _colab_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("colab_cell", ROOT / "tools" / "colab_cell.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_cell_installs_what_pyproject_declares_and_never_torch(path):
    # catches a notebook whose cell went stale after a pyproject bump, or one that reinstalls torch on Colab
    tool = _colab_tool()
    source = "".join(tool.first_code_cell(json.loads(path.read_text()))["source"])
    assert source == tool.colab_cell_source(path.stem), f"{path.name}: run python tools/colab_cell.py"
    logical_lines = source.replace("\\\n", " ").splitlines()          # IPython joins backslash continuations
    install_lines = [line for line in logical_lines if "%pip install" in line]
    assert "--no-deps" in install_lines[0] and not any("torch" in line for line in install_lines)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in declared:
        assert requirement.startswith("torch") or f'"{requirement}"' in install_lines[1], requirement
