"""sapo_lab.book_data: a chapter run alone fetches what it reads, once, checked, or fails in one line.

The fetch tests build a small git repository with a manifest, point SAPO_LAB_REPOSITORY at it and
run from an empty folder, as a notebook copied out of the book runs.
"""

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from _fake_source import git, source_repository

from sapo_lab import book_data
from sapo_lab.evidence.results import results_root

ROOT = Path(__file__).resolve().parents[2]


def test_manifest_and_its_pinned_digest_are_current():
    # catches results committed without rerunning the tool: Colab readers would then fail the SHA-256 check
    done = subprocess.run([str(Path(__import__("sys").executable)), "tools/book_data_manifest.py", "--check"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    text = (ROOT / book_data.MANIFEST).read_bytes()
    assert hashlib.sha256(text).hexdigest() == book_data.MANIFEST_SHA256


def test_committing_results_edits_only_the_generated_digest_module():
    """Catches the digest pinned in book_data.py again (every results commit would then edit the module that
    fetches the data) or the tool writing it anywhere else: the tool's module holds the digest and nothing more,
    and book_data.py holds no digest literal."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("book_data_manifest", ROOT / "tools" / "book_data_manifest.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.MODULE == ROOT / "sapo_lab" / "_book_data_digest.py"
    generated = {}
    exec(tool.module_text("ab" * 32), generated)
    assert {k: v for k, v in generated.items() if not k.startswith("__")} == {"MANIFEST_SHA256": "ab" * 32}
    assert re.search(r"[0-9a-f]{64}", (ROOT / "sapo_lab" / "book_data.py").read_text()) is None


def test_default_source_is_the_repository_of_config_yml():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    assert (book_data.REPOSITORY, book_data.BRANCH) == (config["url"], config["branch"])


def test_every_chapter_that_reads_results_declares_its_data_and_every_pattern_matches():
    manifest = book_data.parse_manifest((ROOT / book_data.MANIFEST).read_text())
    readers = set()
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        code = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        if re.search(r"load_study\(|results_root\(|\.\./results|\.\./experiments", code):
            readers.add(path.stem)
    # catches a chapter that reads committed data with no fetch declared (it would stop on Colab)
    assert readers <= set(book_data.CHAPTERS), readers - set(book_data.CHAPTERS)
    for chapter, patterns in book_data.CHAPTERS.items():
        assert (ROOT / "book" / f"{chapter}.ipynb").is_file(), chapter
        for pattern in patterns:   # catches a misspelt study name, which would fetch nothing
            folder = "/".join(pattern.split("/")[:2]) + "/*"   # results/NAME/*: a study's optional file aside
            wanted = folder if any(pattern.endswith("/" + m) for m in book_data.METADATA) else pattern
            assert book_data.select(manifest, [wanted]), f"{chapter}: {pattern} matches no committed file"


# --- a small source repository -------------------------------------------------------------------------

FILES = {
    "experiments/a.json": b'{"name": "a"}\n',
    "experiments/b.json": b'{"name": "b"}\n',
    "results/a/study.json": b'{"methods": []}\n',
    "results/a/runs/r0/metrics.jsonl": b'{"step": 1}\n' * 500,
    "results/b/study.json": b'{"methods": []}\n',
    "results/b/runs/r0/metrics.jsonl": b'{"step": 2}\n' * 500,
}


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A repository holding FILES and their manifest; the chapter 'ch' reads study a only, in several batches
    (as a large chapter is fetched)."""
    return source_repository(tmp_path, monkeypatch, FILES, batch_bytes=4000)


def test_a_chapter_alone_fetches_exactly_its_files_checked_and_results_root_finds_them(source, capsys):
    root = book_data.chapter_data("ch")
    said = capsys.readouterr().out
    assert root == book_data.cache_root()
    fetched = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    # study b is not read by the chapter: not fetched (catches fetching the whole repository)
    assert fetched == sorted([book_data.MANIFEST, "experiments/a.json", "experiments/b.json",
                              "results/a/study.json", "results/a/runs/r0/metrics.jsonl"])
    for path in fetched[1:]:
        assert (root / path).read_bytes() == FILES[path]
    size = sum(len(FILES[p]) for p in fetched[1:])
    assert f"fetching 4 of its 4 files ({size / 1e6:.1f} MB) from {Path(source).as_uri()}" in said
    assert results_root() == root / "results"     # the chapter's own cells need no change


def test_a_second_run_downloads_nothing_even_with_the_source_gone(source, capsys):
    book_data.chapter_data("ch")
    subprocess.run(["rm", "-rf", str(source)], check=True)
    book_data.chapter_data("ch")
    assert "already in" in capsys.readouterr().out.splitlines()[-1]


def test_a_damaged_cached_file_is_fetched_again(source, capsys):
    root = book_data.chapter_data("ch")
    (root / "results/a/study.json").write_text("tampered")
    book_data.chapter_data("ch")
    assert "fetching 1 of its 4 files" in capsys.readouterr().out
    assert (root / "results/a/study.json").read_bytes() == FILES["results/a/study.json"]


def test_an_unreachable_source_fails_in_one_line_naming_it(source, monkeypatch):
    monkeypatch.setenv("SAPO_LAB_REPOSITORY", "/nonexistent/sapo-lab")
    with pytest.raises(book_data.BookDataError) as failure:
        book_data.chapter_data("ch")
    message = str(failure.value)
    assert "\n" not in message and "file:///nonexistent/sapo-lab" in message
    assert failure.value._render_traceback_() == [f"BookDataError: {message}"]   # what Jupyter shows


def test_data_from_another_version_fails_its_check(source):
    (source / "results/a/study.json").write_bytes(b"{}\n")   # changed, manifest not rewritten
    git(source, "commit", "-q", "-am", "edit")
    with pytest.raises(book_data.BookDataError, match="does not match its SHA-256"):
        book_data.chapter_data("ch")


def test_a_source_with_another_manifest_is_refused_before_any_data(source, monkeypatch):
    monkeypatch.setattr(book_data, "MANIFEST_SHA256", "0" * 64)
    with pytest.raises(book_data.BookDataError, match="another version than this sapo_lab"):
        book_data.chapter_data("ch")
    assert not list((book_data.cache_root()).rglob("*.json"))


def test_inside_a_checkout_nothing_is_fetched(source, monkeypatch, tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "results").mkdir(parents=True)
    (checkout / "experiments").mkdir()
    (checkout / "book").mkdir()
    monkeypatch.chdir(checkout / "book")
    monkeypatch.setenv("SAPO_LAB_REPOSITORY", "/nonexistent/sapo-lab")   # would fail if used
    assert book_data.chapter_data("ch") == checkout
    assert not book_data.cache_root().exists()


def test_every_url_form_reaches_git_as_given(monkeypatch):
    # catches: a file:// source taken for a local path (only https:// recognised as a URL): the module's docstring
    # and the README promise a file:// URL works; read as a path it becomes file:///CWD/file:/... and fails
    for url in ("file:///srv/clone", "http://example.org/fork.git", "ssh://git@example.org/fork.git",
                "git@example.org:owner/fork.git"):
        monkeypatch.setenv("SAPO_LAB_REPOSITORY", url)
        assert book_data.source() == (url, None)


def test_a_folder_with_only_one_of_results_and_experiments_is_not_a_checkout(source, monkeypatch, tmp_path):
    # catches: a folder with results/ alone taken for a checkout ("and" read as "or"): a Colab folder where the
    # reader keeps results/ of their own would be read as the repository and the chapter would find none of its data
    for only in ("results", "experiments"):
        work = tmp_path / f"only-{only}"
        (work / only).mkdir(parents=True)
        monkeypatch.chdir(work)
        assert book_data.repository_root() is None
        assert book_data.chapter_data("ch") == book_data.cache_root()
        assert (book_data.cache_root() / "results/a/study.json").read_bytes() == FILES["results/a/study.json"]


def test_source_forms():
    env = {"SAPO_LAB_REPOSITORY": ""}
    with pytest.MonkeyPatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        assert book_data.source() == (book_data.REPOSITORY, book_data.BRANCH)
        m.setenv("SAPO_LAB_REPOSITORY", "https://example.org/fork.git")
        assert book_data.source() == ("https://example.org/fork.git", None)
        m.setenv("SAPO_LAB_REPOSITORY", "/srv/clone")
        assert book_data.source() == ("file:///srv/clone", None)
