"""The package table of the "Using sapo_lab" page (book/using_sapo_lab.md) matches the tree: every module is listed
under its folder, nothing listed is missing.

Catches a module added, moved or renamed without the table that tells a newcomer where it lives, and a
step-by-step path through a training step that names a function no longer there.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sapo_lab"
PAGE = ROOT / "book" / "using_sapo_lab.md"


def table_rows(readme: str) -> dict[str, set[str]]:
    """``{folder: {module, ...}}`` from the rows of the page's package table (``(top)`` is the top level)."""
    rows = {}
    for line in readme.splitlines():
        m = re.match(r"\| (`([a-z_]+(?:/[a-z_]+)*)/`|\(top\)) \| (.*?) \|", line)
        if m:
            rows[m.group(2) or ""] = set(re.findall(r"`([a-z0-9_]+)`", m.group(3)))
    return rows


def tree() -> dict[str, set[str]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        folder = path.parent.relative_to(PACKAGE).as_posix()
        if path.stem != "__init__" and "__pycache__" not in path.parts:
            found.setdefault("" if folder == "." else folder, set()).add(path.stem)
    return found


def test_the_package_table_lists_every_module_under_its_folder():
    assert table_rows(PAGE.read_text()) == tree()


def test_a_module_missing_from_the_table_is_noticed():
    readme = PAGE.read_text().replace("`seeds`, ", "", 1)
    assert table_rows(readme) != tree()


def test_the_walk_through_a_training_step_names_functions_that_exist():
    readme = PAGE.read_text()
    walk = readme[readme.index("One training step, file by file"):].split("\n\n", 1)[0]
    pairs = re.findall(r"`([a-z_/]+\.py)` \(([^)]*)\)", walk)
    assert len(pairs) >= 4
    for path, names in pairs:
        source = (PACKAGE / path).read_text()
        for name in re.findall(r"`([A-Za-z_.]+)`", names):
            name = name.split(".")[-1]
            if name.endswith(".py"):
                continue
            assert re.search(rf"def {name}\b", source), f"{path} has no function {name}"
