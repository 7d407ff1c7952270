"""Every script in benchmarks/ still imports, and every sapo_lab module it names (code or a child's code string) exists.

The benchmarks run by hand, rarely, so nothing else notices when a module they import moves (a module moved
between sapo_lab's layers, a function renamed). Each script is imported as a module, not run: its
``__main__`` block, the benchmark itself, stays unrun.
"""

import importlib.util
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMED = re.compile(r"(?:from|import) (sapo_lab(?:\.\w+)*)")

PROBE = """
import importlib.util, pathlib, sys
for path in map(pathlib.Path, sys.argv[1:]):
    spec = importlib.util.spec_from_file_location("benchmark_" + path.stem, path)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as exc:
        print(f"{path.name}: {type(exc).__name__}: {exc}")
"""


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package that does not exist
        return False


def unimportable(paths: list[pathlib.Path]) -> list[str]:
    """One line per script that fails to import, or that names a sapo_lab module that does not exist."""
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, paths)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    problems = done.stdout.splitlines() + ([done.stderr.strip().splitlines()[-1]] if done.returncode else [])
    for path in paths:
        for module in sorted(set(NAMED.findall(path.read_text()))):
            if not _exists(module):
                problems.append(f"{path.name}: names {module}, which does not exist")
    return problems


def test_every_benchmark_imports():
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert scripts
    assert unimportable(scripts) == []


def test_a_benchmark_naming_a_moved_module_is_reported(tmp_path):
    """Catches a check that cannot fail: one import of a module that no longer exists, and one inside a code
    string a benchmark hands to a child interpreter, are each reported."""
    source = (ROOT / "benchmarks" / "task_suite_costs.py").read_text()
    moved = tmp_path / "moved_import.py"
    planted = "from sapo_lab.studies.paired import holm\nfrom sapo_lab.tasks import"
    moved.write_text(source.replace("from sapo_lab.tasks import", planted, 1))
    child = tmp_path / "child_string.py"
    child.write_text('CODE = "from sapo_lab.studies.narrative import interval_text"\n')
    problems = unimportable([moved, child])
    assert any(p.startswith("moved_import.py: ModuleNotFoundError") for p in problems), problems
    assert "child_string.py: names sapo_lab.studies.narrative, which does not exist" in problems
