"""Every "Chapter N, §N.M" of the book points to a chapter that has section N.M.

A chapter's numbered sections are read from its markdown headings (``## 14.3 Negative tokens``
or ``## 6. Does the checkpoint rule pick the winner?``). A reference names a chapter, by a link
to its notebook or as plain text ("Chapter 14b"), directly followed by the section sign:
``[Chapter 14](14_critical_analysis.ipynb), §14.5``, ``Chapter 14b, §14.4``, ``(§14.1)``.
References to the review's sections ("the review's §14.5") name no chapter and are not checked.
The mistake this catches: a section moved to another chapter (14.3-14.5 went to 14b) while the
pages that cite it still name the old chapter.
"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"

HEADING = re.compile(r"^#{1,4} (\d+(?:\.\d+)?)\.?\s", re.M)
REFERENCE = re.compile(r"[Cc]hapter \[?(?P<name>\d+[a-z]?)\]?(?:\((?P<link>[\w.]+\.ipynb)\))?[ ,(]{1,3}§ ?(?P<sec>\d+(?:\.\d+)?)")


def page_texts(path: Path) -> list[str]:
    """Every cell's text (markdown, and code whose strings may be rendered), or the whole page."""
    if path.suffix == ".ipynb":
        return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    return [path.read_text()]


def chapter_sections() -> dict[str, set[str]]:
    """Notebook file name -> the section numbers of its headings."""
    out = {}
    for path in sorted(BOOK.glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        out[path.name] = set(HEADING.findall(text))
    return out


def notebook_of(name: str, link: str | None, files) -> str | None:
    if link:
        return link
    hits = [f for f in files if f.startswith(f"{name}_")]
    return hits[0] if len(hits) == 1 else None


def stale_references(pages: dict[str, list[str]], sections: dict[str, set[str]]) -> list[str]:
    bad = []
    for page, texts in pages.items():
        for text in texts:
            for m in REFERENCE.finditer(text):
                target = notebook_of(m["name"], m["link"], sections)
                if target is None or m["sec"] not in sections.get(target, set()):
                    bad.append(f"{page}: {m.group(0)!r} (§{m['sec']} is not a heading of {target})")
    return bad


def book_pages() -> dict[str, list[str]]:
    paths = sorted(BOOK.glob("*.ipynb")) + sorted(BOOK.glob("*.md")) + [ROOT / "README.md"]
    return {p.name: page_texts(p) for p in paths}


def test_every_section_reference_names_the_chapter_that_has_it():
    sections = chapter_sections()
    assert sections["14b_instability_and_tuning.ipynb"] >= {"14.3", "14.4", "14.5"}
    pages = book_pages()
    found = [m for texts in pages.values() for t in texts for m in REFERENCE.finditer(t)]
    assert found, "no chapter-and-section reference found: the pattern no longer matches the book"
    assert stale_references(pages, sections) == []


def test_a_reference_to_a_moved_section_fails():
    sections = chapter_sections()
    planted = {
        "planted.md": [
            "measured in [Chapter 14](14_critical_analysis.ipynb), §14.5.",
            "tuned only at M=4 (Chapter 14, §14.4).",
        ]
    }
    assert len(stale_references(planted, sections)) == 2
    fixed = {"fixed.md": ["measured in [Chapter 14b](14b_instability_and_tuning.ipynb), §14.5; Chapter 14b, §14.4"]}
    assert stale_references(fixed, sections) == []
