"""The import graph follows sapo_lab.layers.ALLOWED: no layer reaches up, and no cycle.

Catches an upward import (a loss module importing the trainer, a task importing the
config) wherever it is written, at the top of a module or inside a function.
"""

import ast
import pathlib

import pytest
from _heavy import heavy_modules_after

from sapo_lab.layers import ALLOWED, SHARED, layer_of

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "sapo_lab"


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: pathlib.Path, root: pathlib.Path) -> set[str]:
    """Every sapo_lab module ``path`` imports, relative imports resolved."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            # `from . import x` imports the submodule x
            found.update(f"{target}.{a.name}" for a in node.names if (root.parent / target.replace(".", "/") / a.name).exists()
                         or (root.parent / target.replace(".", "/") / f"{a.name}.py").exists())
    return {m for m in found if m.split(".")[0] == "sapo_lab"}


def graph(root: pathlib.Path) -> dict[str, set[str]]:
    return {module_name(p, root): imports_of(p, root) for p in sorted(root.rglob("*.py"))}


def violations(root: pathlib.Path) -> list[str]:
    bad = []
    for module, targets in graph(root).items():
        here = layer_of(module)
        for target in sorted(targets):
            there = layer_of(target)
            if there != here and there not in SHARED and there not in ALLOWED.get(here, set()):
                bad.append(f"{module} imports {target} ({here} may not import {there})")
    return bad


def cycles(root: pathlib.Path) -> list[list[str]]:
    """Module-level cycles (package __init__ re-exports of its own submodules aside)."""
    g = graph(root)
    g = {m: {t for t in ts if t in g and not m.startswith(t + ".") and t != m} for m, ts in g.items()}
    found, state = [], {}

    def visit(m, stack):
        state[m] = "open"
        for t in g[m]:
            if state.get(t) == "open":
                found.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"

    for m in g:
        if m not in state:
            visit(m, [m])
    return found


def test_every_layer_is_declared():
    layers = {layer_of(m) for m in graph(PACKAGE)}
    assert layers <= set(ALLOWED), layers - set(ALLOWED)


def test_no_layer_imports_upward():
    assert violations(PACKAGE) == []


def test_no_import_cycle():
    assert cycles(PACKAGE) == []


def _copy_package(tmp_path):
    import shutil

    shutil.copytree(PACKAGE, tmp_path / "sapo_lab", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "sapo_lab"


@pytest.mark.parametrize(
    "module, line, message",
    [
        ("objective/losses.py", "from ..training import trainer", "objective may not import training"),
        ("tasks/base.py", "    from ..runs.config import TrainConfig", "tasks may not import runs"),
        ("training/update.py", "from ..studies import paired", "training may not import studies"),
        ("runs/run_folder.py", "    from ..training.trainer import train", "runs may not import training"),
        ("runs/config.py", "from ..studies.results import Study", "runs may not import studies"),
        ("book_data.py", "    from .training.model import build_model", "book_data may not import training"),
        ("runs/manifest.py", "from ..book_data import cache_root", "runs may not import book_data"),
        ("objective/losses.py", "    from ..book_data import cache_root", "objective may not import book_data"),
        ("evidence/gate_map.py", "from ..objective.kernels import sapo_half_width", "evidence may not import objective"),
        ("evidence/results.py", "    from ..studies.spec import load_declaration", "evidence may not import studies"),
        ("evidence/paired.py", "from ..training.model import build_model", "evidence may not import training"),
    ],
)
def test_a_planted_upward_import_is_reported(tmp_path, module, line, message):
    root = _copy_package(tmp_path)
    path = root / module
    body = f"def _planted():\n{line}\n" if line.startswith(" ") else f"{line}\n"
    path.write_text(path.read_text() + "\n" + body)
    assert any(message in v for v in violations(root))


def test_book_data_takes_its_file_digest_from_the_manifest():
    """The one SHA-256 of a file: book_data imports the manifest's (an allowed import, used)."""
    import sapo_lab.book_data as book_data
    from sapo_lab.runs import manifest

    assert "sapo_lab.runs.manifest" in graph(PACKAGE)["sapo_lab.book_data"]
    assert book_data.sha256_of is manifest.sha256_of


def _heavy_after_importing(root: pathlib.Path, module: str, heavy: tuple[str, ...]) -> list[str]:
    """Which of ``heavy`` a fresh interpreter has loaded after importing ``module`` from the package at ``root``."""
    return heavy_modules_after(f"import {module}", heavy, root.parent)


BOOK_DATA_HEAVY = ("torch", "pydantic", "transformers")


def test_book_data_loads_without_torch_or_pydantic(tmp_path):
    """A chapter's first cell imports sapo_lab.book_data to fetch its data: catches that import reaching torch or
    pydantic (the runs package importing its config eagerly, say); the planted copy shows the check can fail."""
    assert _heavy_after_importing(PACKAGE, "sapo_lab.book_data", BOOK_DATA_HEAVY) == []
    root = _copy_package(tmp_path)
    init = root / "runs" / "__init__.py"
    init.write_text(init.read_text() + "\nfrom . import config  # noqa\n")
    assert "pydantic" in _heavy_after_importing(root, "sapo_lab.book_data", BOOK_DATA_HEAVY)


def test_a_planted_cycle_is_reported(tmp_path):
    root = _copy_package(tmp_path)
    path = root / "tasks" / "base.py"
    path.write_text(path.read_text() + "\nfrom .suite import DIGITS\n")
    assert any("sapo_lab.tasks.base" in c for c in cycles(root))


def test_the_loss_library_loads_without_transformers():
    import subprocess
    import sys

    code = ("import sys, sapo_lab, sapo_lab.objective.losses, sapo_lab.objective.audit, sapo_lab.tasks; "
            "assert 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE.parent)


def test_the_explorers_load_without_the_training_stack(tmp_path):
    """viz may import the loss library (torch) and runs (the plots' metrics reader), but the book's sliders
    (viz.explore) must not wait for torch. Catches an import of the loss library reaching the explorers
    (viz.explore or viz/__init__); the planted copy shows the check can fail."""
    assert _heavy_after_importing(PACKAGE, "sapo_lab.viz.explore", ("torch", "transformers")) == []
    root = _copy_package(tmp_path)
    explore = root / "viz" / "explore.py"
    explore.write_text(explore.read_text() + "\nfrom ..objective import gates  # noqa\n")
    assert "torch" in _heavy_after_importing(root, "sapo_lab.viz.explore", ("torch", "transformers"))


def test_an_installed_package_holds_every_subpackage():
    """A non-editable install (Colab's pip install) ships what pyproject.toml's package discovery finds:
    catches a subpackage left out of an explicit package list."""
    import tomllib
    from setuptools import find_packages

    find = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = set(find_packages(where=str(PACKAGE.parent), include=find["include"]))
    on_disk = {module_name(p, PACKAGE) for p in PACKAGE.rglob("__init__.py")}
    assert on_disk and shipped == on_disk, on_disk ^ shipped


EVIDENCE_HEAVY = ("torch", "pydantic", "transformers")


def _import_every_evidence_module() -> str:
    return ("import importlib, pkgutil, sapo_lab.evidence as e\n"
            "for m in pkgutil.iter_modules(e.__path__):\n"
            "    importlib.import_module('sapo_lab.evidence.' + m.name)")


def test_evidence_loads_neither_torch_nor_pydantic(tmp_path):
    """Every chapter and reviewer reads the committed studies through sapo_lab.evidence: catches any of its
    modules reaching torch or pydantic (a findings module importing a torch-backed helper from the objective,
    the results reader importing the config); the planted copy, one torch import in one findings module,
    shows the check can fail."""
    assert _heavy_after_importing(PACKAGE, "sapo_lab.evidence", EVIDENCE_HEAVY) == []
    assert heavy_modules_after(_import_every_evidence_module(), EVIDENCE_HEAVY, PACKAGE.parent) == []
    root = _copy_package(tmp_path)
    findings = root / "evidence" / "gate_map.py"
    findings.write_text(findings.read_text() + "\nimport torch  # noqa\n")
    assert "torch" in heavy_modules_after(_import_every_evidence_module(), EVIDENCE_HEAVY, root.parent)
