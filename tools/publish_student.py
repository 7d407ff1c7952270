"""Make a copy of the built book without solutions, for students.

    python tools/publish_student.py [BUILD_DIR] [OUTPUT_DIR] [--notebooks-url URL]
    # defaults: _build/html (what `make book` writes) -> _build/student-html

The built book shows every solution (sphinx-exercise's dropdowns) and offers the teacher notebooks: each page's
download button serves ``_sources/book/NAME.ipynb`` and its Colab button opens ``book/NAME.ipynb`` in the
repository. The copy written here drops every solution block and every cell tagged ``solution`` from the pages,
the images only they showed, and the search index (built from the full text, solutions included); serves the
student notebook (``tools/make_student.py``'s stubs, checks kept) in place of each teacher notebook; and points
each Colab button at ``URL/NAME.ipynb`` where the course publishes its ``student/`` notebooks, or removes it
when no URL is given. It then searches the copy for the text of every solution cell and refuses (exit 1, the
first page and solution named) if one is still there. The build itself is only read.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_student", ROOT / "tools" / "make_student.py")
make_student = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_student)

TEACHER_LINK = re.compile(r"/blob/[^/\"']+/book/([\w.-]+\.ipynb)")
# a solution line this long is specific enough to find; shorter ones ("plt.show()") occur anywhere
MIN_LINE = 24


def teacher_notebooks(book: Path) -> dict[str, dict]:
    """NAME.ipynb -> the teacher notebook, for each notebook with a solution cell."""
    found = {}
    for path in sorted(book.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        if any(make_student.is_solution(c) for c in nb["cells"]):
            found[path.name] = nb
    return found


def strip_page(text: str, notebooks_url: str | None) -> tuple[str, int]:
    """The page without its solution blocks, its solution cells and its links to teacher notebooks; and how many
    solution blocks and cells it dropped."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    dropped = 0
    for node in soup.select("div.solution, div.tag_solution"):
        if node.decomposed:
            continue
        node.decompose()
        dropped += 1
    for link in soup.find_all("a", href=TEACHER_LINK):
        name = TEACHER_LINK.search(link["href"]).group(1)
        if notebooks_url:
            link["href"] = f"{notebooks_url.rstrip('/')}/{name}"
        else:
            (link.find_parent("li") or link).decompose()
    return str(soup), dropped


def solution_lines(teacher: dict) -> list[str]:
    """The distinctive lines of the notebook's solution cells (stripped, at least MIN_LINE characters, and found in
    none of its other cells nor in the student's stub, which keeps the solution's ``def`` line)."""
    own, elsewhere = [], []
    for cell in teacher["cells"]:
        source = "".join(cell["source"])
        if make_student.is_solution(cell):
            own += [ln.strip() for ln in source.splitlines() if len(ln.strip()) >= MIN_LINE]
            elsewhere.append(make_student.stub_source(cell))
        else:
            elsewhere.append(source)
    others = "\n".join(elsewhere)
    return [ln for ln in own if ln not in others]


def leaks(out: Path, teachers: dict[str, dict]) -> list[str]:
    """'page: line' for each solution line still readable in the copy's pages or notebooks."""
    found = []
    for name, teacher in teachers.items():
        lines = solution_lines(teacher)
        stem = name.removesuffix(".ipynb")
        for page in [*out.rglob(f"{stem}.html"), *out.rglob(name)]:
            text = page.read_text(errors="replace")
            readable = html.unescape(re.sub(r"<[^>]+>", "", text)) if page.suffix == ".html" else text
            found += [f"{page.relative_to(out)}: {ln}" for ln in lines if ln in readable or json.dumps(ln)[1:-1] in text]
    return found


def publish(build: Path, out: Path, notebooks_url: str | None = None) -> dict:
    """Write the copy (see the module's docstring); returns counts of what was dropped and replaced."""
    if not (build / "index.html").is_file():
        raise FileNotFoundError(f"{build} is not a built book (no index.html): run `make book` first")
    if out.resolve() == build.resolve() or build.resolve() in out.resolve().parents:
        raise ValueError(f"the output folder {out} must lie outside the build {build}")
    teachers = teacher_notebooks(ROOT / "book")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(build, out)
    counts = {"pages": 0, "solutions_dropped": 0, "notebooks_replaced": 0, "images_dropped": 0}
    for page in out.rglob("*.html"):
        text, dropped = strip_page(page.read_text(), notebooks_url)
        page.write_text(text)
        counts["pages"] += 1
        counts["solutions_dropped"] += dropped
    for name, teacher in teachers.items():
        for served in out.rglob(name):
            served.write_text(make_student.dumps(make_student.student_notebook(teacher)))
            counts["notebooks_replaced"] += 1
    pages = "".join(p.read_text() for p in out.rglob("*.html"))
    for image in (out / "_images").glob("*") if (out / "_images").is_dir() else []:
        if image.name not in pages:
            image.unlink()
            counts["images_dropped"] += 1
    index = out / "searchindex.js"
    if index.exists():
        index.write_text('Search.setIndex({"docnames": [], "filenames": [], "titles": [], "terms": {}, '
                         '"titleterms": {}, "objects": {}, "objnames": {}, "objtypes": {}, "envversion": {}, '
                         '"indexentries": {}, "alltitles": {}})\n')
    left = leaks(out, teachers)
    if left:
        raise RuntimeError(f"a solution is still readable in the copy: {left[0]}")
    return counts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", nargs="?", default=str(ROOT / "_build" / "html"))
    parser.add_argument("output", nargs="?", default=str(ROOT / "_build" / "student-html"))
    parser.add_argument("--notebooks-url", default=None,
                        help="where the course publishes student/ (each Colab button opens URL/NAME.ipynb)")
    args = parser.parse_args(argv)
    try:
        counts = publish(Path(args.build), Path(args.output), args.notebooks_url)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}: {counts['pages']} pages, {counts['solutions_dropped']} solution blocks and cells "
          f"dropped, {counts['notebooks_replaced']} teacher notebooks replaced by student ones, "
          f"{counts['images_dropped']} images only solutions showed dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
