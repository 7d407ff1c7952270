"""sapo_lab.book_data trusts a byte only when its SHA-256 says so: a same-size change in the cache, in a fetched
blob, or in the cached manifest itself is caught, and an scp-style git source is not read as a path.

Each damaged file here keeps its size, so a check on the size alone (the easy shortcut) passes it; the expected
bytes are the source repository's own, written by the fixture (tests/_fake_source.py),
never read back through ``book_data``.
"""

import pytest
from _fake_source import git, manifest_bytes, source_repository

from sapo_lab import book_data

FILES = {
    "experiments/a.json": b'{"name": "a"}\n',
    "results/a/study.json": b'{"methods": ["sapo"]}\n',
    "results/a/runs/r0/metrics.jsonl": b'{"step": 1}\n' * 50,
    "results/b/study.json": b'{"methods": ["grpo"]}\n',
}
CHAPTER_FILES = ["experiments/a.json", "results/a/runs/r0/metrics.jsonl", "results/a/study.json"]


def _one_byte_changed(data: bytes) -> bytes:
    """The same length, one byte different: only a digest tells them apart."""
    changed = data.replace(b"s", b"S", 1) if b"s" in data else data.replace(b"1", b"7", 1)
    assert len(changed) == len(data) and changed != data
    return changed


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A source repository holding FILES and their manifest, pinned; the chapter 'ch' reads study a."""
    return source_repository(tmp_path, monkeypatch, FILES)


def test_a_cached_file_changed_in_one_byte_at_the_same_size_is_fetched_again(source, capsys):
    # catches a cache check on the size alone: the damaged file would be read as verified
    root = book_data.chapter_data("ch")
    damaged = root / "results/a/study.json"
    damaged.write_bytes(_one_byte_changed(FILES["results/a/study.json"]))
    capsys.readouterr()
    book_data.chapter_data("ch")
    said = capsys.readouterr().out
    assert "fetching 1 of its 3 files" in said and "already in" not in said
    assert damaged.read_bytes() == FILES["results/a/study.json"]


def test_a_fetched_blob_changed_in_one_byte_at_the_same_size_is_refused(source):
    # catches a fetched blob accepted on its size: the source's data changed, its manifest did not
    path = "results/a/study.json"
    (source / path).write_bytes(_one_byte_changed(FILES[path]))
    git(source, "commit", "-q", "-am", "same size, other bytes")
    with pytest.raises(book_data.BookDataError, match="study.json .*does not match its SHA-256") as failure:
        book_data.chapter_data("ch")
    assert "\n" not in str(failure.value)
    assert not (book_data.cache_root() / path).exists()   # nothing unverified lands in the cache


def test_a_cached_manifest_that_is_not_the_pinned_one_is_not_trusted(source, capsys):
    # catches the cached manifest used without its pinned digest: a manifest rewritten to vouch for changed
    # data would make the changed data pass its own check
    root = book_data.chapter_data("ch")
    path = "results/a/study.json"
    tampered = {**FILES, path: _one_byte_changed(FILES[path])}
    (root / path).write_bytes(tampered[path])
    (root / book_data.MANIFEST).write_bytes(manifest_bytes(tampered))
    capsys.readouterr()
    book_data.chapter_data("ch")
    said = capsys.readouterr().out
    assert "already in" not in said and "fetching 1 of its 3 files" in said
    assert (root / path).read_bytes() == FILES[path]
    assert (root / book_data.MANIFEST).read_bytes() == manifest_bytes(FILES)   # the pinned manifest is back


def test_every_file_of_a_fresh_fetch_is_the_sources_bytes(source):
    # catches a fetch that writes a blob under another path (the manifest's order against the tree's)
    root = book_data.chapter_data("ch")
    fetched = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != book_data.MANIFEST)
    assert fetched == CHAPTER_FILES
    for path in fetched:
        assert (root / path).read_bytes() == (source / path).read_bytes()


@pytest.mark.parametrize("given", ["git@example.org:owner/repo.git", "git@example.org:owner/repo"])
def test_an_scp_style_git_source_goes_to_git_unchanged(given, monkeypatch):
    # catches `git@host:owner/repo` taken for a local path: it would become file:///cwd/git@host:owner/repo
    monkeypatch.setenv(book_data.ENV_SOURCE, given)
    assert book_data.source() == (given, None)


def test_a_relative_local_path_becomes_a_file_url_of_its_absolute_path(tmp_path, monkeypatch):
    # the other side of the rule above: a plain path is git's file:// transport, resolved from the cwd
    (tmp_path / "clone").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(book_data.ENV_SOURCE, "clone")
    assert book_data.source() == (f"file://{tmp_path.resolve()}/clone", None)
