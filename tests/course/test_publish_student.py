"""``tools/publish_student.py`` (book/instructor.md's command): a copy of the built book without solutions.

On a small build made here from a real chapter: the solution blocks and solution cells leave the pages, the
teacher notebook served for download becomes the student one, an image only a solution showed is dropped, the
Colab button leaves or points where the course publishes ``student/``, and a solution left in a page (outside the
markup the tool removes) is refused in one line. On the real build, when ``make book`` has written one, the copy
holds no solution line.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "publish_student.py"
spec = importlib.util.spec_from_file_location("publish_student", TOOL)
publish_student = importlib.util.module_from_spec(spec)
spec.loader.exec_module(publish_student)
NAME = "03_group_advantages.ipynb"
TEACHER = json.loads((ROOT / "book" / NAME).read_text())
SOLUTION = next("".join(c["source"]) for c in TEACHER["cells"]
                if publish_student.make_student.is_solution(c) and c["cell_type"] == "code")
COLAB = f"https://colab.research.google.com/github/sapo-lab/sapo-lab/blob/main/book/{NAME}"


def small_build(tmp_path: Path, extra: str = "") -> Path:
    build = tmp_path / "html"
    (build / "book").mkdir(parents=True)
    (build / "_sources" / "book").mkdir(parents=True)
    (build / "_images").mkdir()
    (build / "index.html").write_text("<html><body>index</body></html>")
    (build / "_images" / "solution_plot.png").write_bytes(b"png")
    (build / "_images" / "chapter_plot.png").write_bytes(b"png")
    (build / "searchindex.js").write_text('Search.setIndex({"terms": {"mean_sq": [3]}})')
    (build / "_sources" / "book" / NAME).write_text((ROOT / "book" / NAME).read_text())
    page = f"""<html><body>
<ul><li><a href="{COLAB}">Colab</a></li><li><a href="../_sources/book/{NAME}">.ipynb</a></li></ul>
<p>The chapter.</p><img src="../_images/chapter_plot.png">
<div class="solution dropdown admonition" id="s1"><div class="cell tag_solution docutils container">
<pre>{SOLUTION}</pre><img src="../_images/solution_plot.png"></div></div>
{extra}
</body></html>"""
    (build / "book" / NAME.replace(".ipynb", ".html")).write_text(page)
    return build


def test_the_copy_holds_no_solution_and_serves_the_student_notebook(tmp_path):
    # catches: a solution block left on a page, the teacher notebook still served for download, an image only a
    # solution showed still published, or the Colab button still opening the teacher notebook
    out = tmp_path / "student-html"
    counts = publish_student.publish(small_build(tmp_path), out)
    page = (out / "book" / NAME.replace(".ipynb", ".html")).read_text()
    assert counts["solutions_dropped"] == 1 and "The chapter." in page
    assert all(line.strip() not in page for line in SOLUTION.splitlines() if len(line.strip()) > 10)
    served = json.loads((out / "_sources" / "book" / NAME).read_text())
    assert served == publish_student.make_student.student_notebook(TEACHER)
    assert not (out / "_images" / "solution_plot.png").exists() and (out / "_images" / "chapter_plot.png").exists()
    assert "colab" not in page and "mean_sq" not in (out / "searchindex.js").read_text()
    assert (tmp_path / "html" / "_images" / "solution_plot.png").exists()  # the build itself is only read


def test_the_colab_button_opens_the_courses_student_notebook_when_given(tmp_path):
    # catches: --notebooks-url ignored (the button removed, or left on the teacher notebook)
    out = tmp_path / "student-html"
    publish_student.publish(small_build(tmp_path), out, notebooks_url="https://course.example/student/")
    page = (out / "book" / NAME.replace(".ipynb", ".html")).read_text()
    assert f'href="https://course.example/student/{NAME}"' in page and COLAB not in page


def test_a_solution_outside_the_removed_markup_is_refused_in_one_line(tmp_path):
    # catches: a copy published with a solution the stripping missed (rendered by other markup than
    # sphinx-exercise's), because only the removal, not the result, was checked
    line = publish_student.solution_lines(TEACHER)[0]  # a line only the solution holds (not its stub's def line)
    assert line in SOLUTION
    build = small_build(tmp_path, extra=f"<pre>{line}</pre>")
    run = subprocess.run([sys.executable, str(TOOL), str(build), str(tmp_path / "out")], capture_output=True,
                         text=True)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith("error: a solution is still readable in the copy:") and line in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_a_folder_that_is_no_build_is_refused(tmp_path):
    run = subprocess.run([sys.executable, str(TOOL), str(tmp_path), str(tmp_path / "out")], capture_output=True,
                         text=True)
    assert run.returncode == 1 and "no index.html" in run.stderr and "make book" in run.stderr


@pytest.mark.slow
def test_the_real_build_copied_without_solutions(tmp_path):
    # catches: a page's solutions rendered in markup the tool does not remove (the tool's own search for every
    # solution line would refuse the copy)
    build = ROOT / "_build" / "html"
    if not (build / "index.html").is_file():
        pytest.skip("no built book (make book)")
    counts = publish_student.publish(build, tmp_path / "student-html")
    solutions = sum(publish_student.make_student.is_solution(c) for nb in
                    publish_student.teacher_notebooks(ROOT / "book").values() for c in nb["cells"])
    assert counts["solutions_dropped"] >= 0.5 * solutions and counts["notebooks_replaced"] > 0
