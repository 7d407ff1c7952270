"""The book data's small parts at their edges: a manifest path with spaces, a batch exactly one budget long, a blank
source variable, git's last error line, two blobs read from one cat-file stream, and the cache folder's name."""

import os
import subprocess

import pytest

from sapo_lab import book_data
from sapo_lab._book_data_digest import MANIFEST_SHA256

EIGHT_MB = 8 * 2**20  # the batch budget the module documents (~8 MB of blobs a fetch), typed here


def test_a_manifest_path_may_contain_spaces():
    """Catches a line split at every space: 'SHA256 SIZE PATH' splits twice, so a path keeps its spaces."""
    got = book_data.parse_manifest("# a comment\nabc123 12 results/my study/summary.json\n\nfff 0 experiments/x.json\n")
    assert got == {"results/my study/summary.json": ("abc123", 12), "experiments/x.json": ("fff", 0)}


def test_a_batch_closes_when_it_reaches_its_budget_exactly():
    """Catches `>` for `>=`: a blob of exactly 8 MiB fills its batch, so the next blob starts another; a blob one
    byte short leaves room for the next."""
    assert book_data.BATCH_BYTES == EIGHT_MB
    full = {"a": ("", EIGHT_MB), "b": ("", 1)}
    assert book_data._batches(["a", "b"], full) == [["a"], ["b"]]
    short = {"a": ("", EIGHT_MB - 1), "b": ("", 1), "c": ("", 5)}
    assert book_data._batches(["a", "b", "c"], short) == [["a", "b"], ["c"]]


@pytest.mark.parametrize("blank", ["", "  ", "\t\n"])
def test_a_blank_source_variable_means_the_default_repository(monkeypatch, blank):
    """Catches the variable used unstripped: whitespace alone is no source, not a local path named '  '."""
    monkeypatch.setenv(book_data.ENV_SOURCE, blank)
    assert book_data.source() == (book_data.REPOSITORY, "main")


def test_a_git_failure_reports_gits_last_line(tmp_path, monkeypatch):
    """Catches the first stderr line reported: git says what it was doing ('Cloning into ...') before the reason
    it failed; the one-line error must carry the reason, without git's 'fatal: ' prefix. A stand-in git on PATH
    prints both lines, as a failed clone does."""
    fake = tmp_path / "bin" / "git"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho \"Cloning into 'copy'...\" >&2\n"
                    "echo \"fatal: repository 'missing' does not exist\" >&2\nexit 128\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    with pytest.raises(book_data.BookDataError) as raised:
        book_data._git(["clone", "missing", "copy"], tmp_path, "SOURCE")
    assert str(raised.value) == "cannot fetch the book's data from SOURCE: repository 'missing' does not exist"


def test_two_blobs_read_from_one_cat_file_stream(tmp_path):
    """Catches the newline after each blob left unread: the second blob must come back whole, byte for byte."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    contents = [b"first blob\n", b"second\nblob without a final newline"]
    oids = [subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=tmp_path, input=c, capture_output=True,
                           check=True).stdout.decode().strip() for c in contents]
    assert book_data._read_blobs(oids, tmp_path) == contents


def test_the_cache_has_one_folder_per_manifest(monkeypatch, tmp_path):
    """Catches another prefix length of the manifest digest naming the cache folder (a reader's cache from the
    same version would not be found): the first 12 hex digits of the pinned digest."""
    monkeypatch.setenv(book_data.ENV_CACHE, str(tmp_path))
    assert book_data.cache_root() == tmp_path / MANIFEST_SHA256[:12]
    assert len(book_data.cache_root().name) == 12
