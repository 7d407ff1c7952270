"""Plant each mutation of ``tools/wiring_mutations.py`` in a copy of the repository, one at a time, and run
the non-slow tests against it: a mutation no test fails on is a gap in the wiring tests.

    python tools/try_mutations.py                       # every mutation, against the tests that caught it
    python tools/try_mutations.py --suite               # every mutation, against the whole non-slow suite
    python tools/try_mutations.py --only "KL term" ...  # the mutations whose name contains a text
    python tools/try_mutations.py --only "doctor:" --tests tests/runs/test_doctor_boundaries.py
                                                        # ... against these test files instead of their own
    python tools/try_mutations.py --list my_mutations.py --slow
                                                        # another list (a ``caught_by`` of "auto": every test
                                                        # file that imports the mutated module), slow tests too

The copy is the working tree's files (uncommitted edits and new files git does not ignore included) in a
temporary folder, so the checkout itself is never modified. Exit status 1 when some mutation survived. On two
cores a mutation takes about 10-20 s against its own test file and 25-45 s against the suite (two pytest
workers).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wiring_mutations import MUTATIONS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The non-slow tests that run the training code: every file but these (prefixes), which never reach it.
SUITE = "tests"
NOT_TRAINING = ("test_book", "test_docs", "test_student", "test_plots", "test_browser", "test_build_scope",
                "test_conformance", "test_analysis", "test_paired", "test_study_results", "test_readme_layout",
                "test_layers", "test_cli_help", "test_config_committed", "test_mutation_list")


def copy_tree(dest: str) -> None:
    """The working tree's files as they are now (tracked ones and new ones git does not ignore) under ``dest``,
    committed there."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))
    # a repository of its own, committed: the manifest check (tools/book_data_manifest.py) reads HEAD
    git = ["git", "-c", "user.name=mutations", "-c", "user.email=mutations@localhost", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the working tree"]):
        subprocess.run([*git, *args], cwd=dest, check=True, capture_output=True)


def make_interpreter(tree: str) -> str:
    """A Python for ``tree``: a venv whose only path entries are ``tree`` and this interpreter's site-packages.

    Listed as plain paths, the site-packages' own ``.pth`` files are not run, so the editable install of the
    checkout never puts the checkout's sapo_lab in front of the copy's, not even in the grader's isolated
    (``-I``) student processes, which ignore PYTHONPATH."""
    import site
    import sysconfig

    venv = os.path.join(tree, ".mutation-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    here = sysconfig.get_path("purelib")
    with open(os.path.join(purelib, "mutation-tree.pth"), "w") as f:
        f.write("\n".join([tree, here, *(p for p in site.getsitepackages() if p != here)]) + "\n")
    return python


def suite_files(tree: str, everything: bool = False) -> list[str]:
    paths = sorted(os.path.relpath(os.path.join(folder, f), tree)
                   for folder, _, files in os.walk(os.path.join(tree, SUITE))
                   for f in files if f.startswith("test_") and f.endswith(".py"))
    return paths if everything else [p for p in paths if not os.path.basename(p).startswith(NOT_TRAINING)]


def area(m) -> str:
    """The layer a mutation plants its mistake in: ``sapo_lab/LAYER/...`` (``book_data`` for the top module)."""
    parts = m.path.split("/")
    return parts[1].removesuffix(".py") if parts[0] == "sapo_lab" else parts[0]


def caught_by_area(chosen, survived) -> dict[str, tuple[int, int]]:
    """``{area: (caught, planted)}`` over the mutations run."""
    out: dict[str, tuple[int, int]] = {}
    for m in chosen:
        caught, total = out.get(area(m), (0, 0))
        out[area(m)] = (caught + (m.name not in survived), total + 1)
    return out


def load_list(path: str) -> list:
    """MUTATIONS of another file written like ``wiring_mutations.py`` (a list of its ``Mutation``)."""
    spec = importlib.util.spec_from_file_location("other_mutations", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.MUTATIONS)


def importing_tests(tree: str, module_path: str) -> list[str]:
    """The test files of ``tree`` that import the module at ``module_path`` (by its dotted name, or by its short
    name from its package), which are the files most likely to fail on a mistake planted in it."""
    dotted = module_path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    package, _, stem = dotted.rpartition(".")
    by_name = re.compile(rf"(\b{re.escape(dotted)}\b)|(from {re.escape(package)} import [^\n]*\b{stem}\b)")
    found = []
    for path in suite_files(tree, everything=True):
        with open(os.path.join(tree, path)) as f:
            if by_name.search(f.read()):
                found.append(path)
    return found


def targets_for(tree: str, m) -> list[str]:
    return importing_tests(tree, m.path) if m.caught_by == "auto" else [m.caught_by.split("::")[0]]


def run_tests(tree: str, python: str, targets: list[str], workers: int = 0, slow: bool = False) -> tuple[bool, str]:
    """``(passed, first failing test)`` of pytest over ``targets`` in ``tree``, stopping at the first failure."""
    cmd = [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not browser" if slow else
           "not slow and not browser",
           *(["-n", str(workers)] if workers else []), *targets]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": tree}
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env)
    failed = [line.split(" ")[1] for line in proc.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return proc.returncode == 0, failed[0] if failed else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", action="store_true", help="run the whole non-slow training suite for each mutation")
    ap.add_argument("--only", nargs="+", default=[], help="only mutations whose name contains one of these")
    ap.add_argument("--tests", nargs="+", default=[], metavar="PATH",
                    help="run these test files (or node ids) against each mutation instead of the one it names")
    ap.add_argument("--list", metavar="FILE", help="plant the MUTATIONS of this file instead of wiring_mutations.py's")
    ap.add_argument("--slow", action="store_true", help="run the slow tests too (make test runs them)")
    args = ap.parse_args(argv)
    if args.suite and args.tests:
        print("error: --suite and --tests choose the tests two ways; give one", file=sys.stderr)
        return 2
    listed = load_list(args.list) if args.list else MUTATIONS
    chosen = [m for m in listed if not args.only or any(text in m.name for text in args.only)]
    if not chosen:
        print("error: no mutation matches --only", file=sys.stderr)
        return 2
    survived = []
    with tempfile.TemporaryDirectory(prefix="sapo-mutations-") as tree:
        copy_tree(tree)
        python = make_interpreter(tree)
        baseline = args.tests or sorted({t for m in chosen for t in targets_for(tree, m)})
        passed, failing = run_tests(tree, python, baseline, workers=2 if len(baseline) > 4 else 0, slow=args.slow)
        if not passed:
            print(f"error: the unmutated tests fail ({failing}); fix them first", file=sys.stderr)
            return 2
        targets = suite_files(tree) if args.suite else args.tests or None
        for i, m in enumerate(chosen, 1):
            path = os.path.join(tree, m.path)
            with open(path) as f:
                source = f.read()
            if source.count(m.old) != 1:
                print(f"error: {m.name!r}: its text occurs {source.count(m.old)} times in {m.path}", file=sys.stderr)
                return 2
            with open(path, "w") as f:
                f.write(source.replace(m.old, m.new))
            t0 = time.perf_counter()
            try:
                mine = targets or targets_for(tree, m)
                passed, failing = run_tests(tree, python, mine, workers=2 if args.suite or len(mine) > 4 else 0,
                                            slow=args.slow)
            finally:
                with open(path, "w") as f:
                    f.write(source)
            verdict = "survived" if passed else f"caught by {failing}"
            print(f"[{i}/{len(chosen)}] {m.name}: {verdict} ({time.perf_counter() - t0:.0f} s)", flush=True)
            if passed:
                survived.append(m.name)
    for area, (caught, total) in sorted(caught_by_area(chosen, survived).items()):
        print(f"  {area}: {caught} of {total} caught")
    print(f"{len(chosen) - len(survived)} of {len(chosen)} caught" + (f"; survived: {survived}" if survived else ""))
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main())
