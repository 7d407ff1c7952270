"""``tools/wiring_mutations.py`` still fits the code: a refactor that moves a mutated line, or renames the
test said to catch it, fails here instead of silently leaving ``tools/try_mutations.py`` nothing to plant."""

import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

from wiring_mutations import MUTATIONS  # noqa: E402


def _test_names(path: str) -> set[str]:
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_each_mutation_applies_exactly_once_and_changes_the_code():
    for m in MUTATIONS:
        with open(os.path.join(ROOT, m.path)) as f:
            source = f.read()
        assert source.count(m.old) == 1, f"{m.name}: its text occurs {source.count(m.old)} times in {m.path}"
        assert m.new != m.old, m.name
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)


def test_each_mutation_names_a_test_that_exists():
    for m in MUTATIONS:
        path, name = m.caught_by.split("::")
        assert name in _test_names(path), f"{m.name}: {m.caught_by} does not exist"


def test_the_contributing_page_counts_the_list():
    # catches mistakes added to the list while the page that describes the check still gives the old count
    with open(os.path.join(ROOT, "book", "contributing.md")) as f:
        page = " ".join(f.read().split())
    assert f"the {len(MUTATIONS)} deliberate mistakes of `tools/wiring_mutations.py`" in page
