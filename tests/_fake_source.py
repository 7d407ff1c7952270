"""A small git repository standing in for the book's source, for the sapo_lab.book_data tests.

``source_repository`` writes the given files and their manifest, commits them, pins the manifest's digest,
declares one chapter, ``ch``, reading ``results/a/*``, points SAPO_LAB_REPOSITORY and SAPO_LAB_CACHE at the
test's folder and moves into an empty folder, as a notebook copied out of the book runs."""

from __future__ import annotations

import hashlib
import subprocess

from sapo_lab import book_data


def git(cwd, *args) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def manifest_bytes(files: dict[str, bytes]) -> bytes:
    """The manifest of ``files`` as tools/book_data_manifest.py writes one: digest, size and path a line."""
    lines = "".join(f"{hashlib.sha256(d).hexdigest()} {len(d)} {p}\n" for p, d in sorted(files.items()))
    return ("# test manifest\n" + lines).encode()


def source_repository(tmp_path, monkeypatch, files: dict[str, bytes], batch_bytes: int | None = None):
    repo = tmp_path / "source"
    for path, data in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    manifest = manifest_bytes(files)
    (repo / book_data.MANIFEST).write_bytes(manifest)
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "data")
    monkeypatch.setattr(book_data, "MANIFEST_SHA256", hashlib.sha256(manifest).hexdigest())
    monkeypatch.setattr(book_data, "CHAPTERS", {"ch": ("results/a/*",)})
    if batch_bytes is not None:
        monkeypatch.setattr(book_data, "BATCH_BYTES", batch_bytes)
    monkeypatch.setenv("SAPO_LAB_REPOSITORY", str(repo))
    monkeypatch.setenv("SAPO_LAB_CACHE", str(tmp_path / "cache"))
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    return repo
