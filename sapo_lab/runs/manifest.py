"""A folder that verifies itself: ``manifest.json`` records the size and SHA-256 of every file beside it.

Written last, after every file has been fsynced, so its presence means "complete"; a reader
checks the bytes against it before trusting the folder. Checkpoints, the cold-start model and
a saved final model carry one.
"""

from __future__ import annotations

import hashlib
import json
import os

from .durable import fsync_file, write_json

MANIFEST = "manifest.json"


def sha256_of(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: str) -> dict:
    """fsync every file in ``directory`` and record its size and SHA-256 in ``manifest.json`` (last)."""
    files = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name == MANIFEST or not os.path.isfile(path):
            continue
        fsync_file(path)
        files[name] = {"size": os.path.getsize(path), "sha256": sha256_of(path)}
    manifest = {"format": 1, "files": files}
    write_json(os.path.join(directory, MANIFEST), manifest, sort_keys=True)
    return manifest


def verify_manifest(directory: str) -> str | None:
    """None when every file listed in ``manifest.json`` has its recorded size and hash,
    else one line saying which file is wrong and how. Raises FileNotFoundError without a manifest."""
    path = os.path.join(directory, MANIFEST)
    with open(path) as f:
        text = f.read()
    try:
        files = json.loads(text)["files"]
        assert isinstance(files, dict) and files
    except (ValueError, KeyError, TypeError, AssertionError):
        return f"{MANIFEST} is damaged"
    for name, want in files.items():
        p = os.path.join(directory, name)
        if not os.path.isfile(p):
            return f"{name} is missing"
        size = os.path.getsize(p)
        if size != want["size"]:
            return f"{name} has {size} bytes, its manifest says {want['size']}" + (" (truncated)" if size < want["size"] else "")
        if sha256_of(p) != want["sha256"]:
            return f"{name} does not match its SHA-256 in {MANIFEST} (the bytes changed)"
    return None
