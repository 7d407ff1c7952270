"""``metrics.jsonl`` has one reader: sapo_lab.runs.run_folder (issue 18, "one owner per concern").

A module that opens the file itself decides on its own what a torn last line or a damaged row
means, and the study tables, the plots and the trajectory fingerprints would disagree on the
same run. The check reads the source (docstrings aside, which may name the file).
"""

import ast
import pathlib
import shutil

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "sapo_lab"
OWNER = pathlib.Path("runs") / "run_folder.py"
FILE_NAME = "metrics.jsonl"
OPENERS = {"open", "read_text", "read_bytes"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _names_the_metrics_file(node: ast.AST) -> bool:
    """``"metrics.jsonl"``, the ``METRICS`` constant or a ``RunFolder``'s ``.metrics`` path, anywhere in ``node``."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and FILE_NAME in sub.value:
            return True
        if isinstance(sub, ast.Name) and sub.id == "METRICS" or isinstance(sub, ast.Attribute) and sub.attr == "metrics":
            return True
    return False


def _opens_the_metrics_file(node: ast.AST) -> bool:
    """``open(...)``, ``p.open()``, ``p.read_text()`` or ``p.read_bytes()`` of a path that names the metrics file."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
        targets = node.args
    elif isinstance(func, ast.Attribute) and func.attr in OPENERS:
        targets = [func.value, *node.args]
    else:
        return False
    return any(_names_the_metrics_file(t) for t in targets)


def own_readers(root: pathlib.Path) -> list[str]:
    """``path:line`` of every place outside the owner that spells the file name or opens the file."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel == OWNER:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            spelled = (isinstance(node, ast.Constant) and isinstance(node.value, str) and FILE_NAME in node.value
                       and id(node) not in docs)
            if spelled or _opens_the_metrics_file(node):
                found.append(f"{rel}:{node.lineno}")
    return sorted(set(found))


def test_only_the_run_folder_reads_metrics_jsonl():
    """Catches a module that reads ``metrics.jsonl`` with its own parser instead of ``run_folder.read_metrics``."""
    assert own_readers(PACKAGE) == []


@pytest.mark.parametrize(
    "module, planted",
    [
        ("evidence/results.py", "def _rows(d):\n    with open(d + '/metrics.jsonl') as f:\n        return f.readlines()\n"),
        ("viz/plots.py", "def _rows(d):\n    return open(os.path.join(d, METRICS)).readlines()\n"),
        ("evidence/paired.py", "def _rows(d):\n    return Path(RunFolder(d).metrics).read_text()\n"),
    ],
    ids=["file-name-spelled", "constant-opened", "folder-path-read"],
)
def test_a_planted_reader_is_found(tmp_path, module, planted):
    root = tmp_path / "sapo_lab"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    path = root / module
    path.write_text(path.read_text() + "\n\n" + planted)
    assert any(hit.startswith(module) for hit in own_readers(root)), own_readers(root)
