"""The rocket button's Colab link of every chapter opens that chapter's notebook in the repository.

The link is built by the book's theme itself (sphinx_book_theme's add_launch_buttons) from the
configuration Jupyter Book derives from _config.yml; the test checks the path it names is the
notebook's path in the repository, on the branch the chapters fetch their data from.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest

# book tools, absent from the compatibility leg's environment
pytest.importorskip("jupyter_book", reason="jupyter-book is not installed here")
from jupyter_book.config import get_final_config  # noqa: E402
from sphinx_book_theme.header_buttons.launch import add_launch_buttons  # noqa: E402

from sapo_lab import book_data

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def colab_link(pagename: str) -> str:
    config, _ = get_final_config(user_yaml=ROOT / "_config.yml", cli_config={"latex_individualpages": False},
                                 sourcedir=ROOT)
    options = config["html_theme_options"]
    org, repo = options["repository_url"].split("github.com/")[1].split("/")[:2]
    app = SimpleNamespace(
        config={"html_theme_options": options},
        env=SimpleNamespace(doc2path=lambda name: str(ROOT / f"{name}.ipynb"),
                            metadata={pagename: {"kernelspec": {}}}),
    )
    context = {"pagename": pagename, "sourcename": f"{pagename}.ipynb", "header_buttons": [],
               "github_url": "https://github.com", "github_user": org, "github_repo": repo}
    add_launch_buttons(app, pagename, "page.html", context, None)
    (group,) = context["header_buttons"]
    (colab,) = [b["url"] for b in group["buttons"] if b["text"] == "Colab"]
    return colab


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_link_opens_the_committed_notebook_on_the_data_branch(path):
    page = f"book/{path.stem}"
    url = colab_link(page)
    repo = book_data.REPOSITORY.split("github.com/")[1]
    prefix = f"https://colab.research.google.com/github/{repo}/blob/{book_data.BRANCH}/"
    # catches a path_to_book or branch that sends the reader to a missing file or another branch's data
    assert url.startswith(prefix), url
    assert url.removeprefix(prefix) == f"book/{path.name}", url
