"""Writes that survive a kill or a power cut: the one way the training layer puts a file on disk.

* :func:`atomic_write` writes a temporary file beside the target, flushes and fsyncs it,
  renames it over the target and fsyncs the directory, so a reader sees the old file or
  the new one, never half of one;
* :func:`append_line` appends to a log and fsyncs it, so a row that was reported written
  is on the disk (a kill during the append can leave a torn last line, which the reader
  of that log must tolerate);
* :func:`install` and :func:`move` put a file or folder written elsewhere (a library's
  writer, a folder set aside) in place and fsync the directories whose entries changed.
"""

from __future__ import annotations

import json
import os

TMP_SUFFIX = ".tmp"  # what a temporary file beside its target is called: ``NAME.tmp``


def fsync_file(path: str) -> None:
    """Flush a written file's bytes to the disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: str) -> None:
    """Flush a directory's entries (new names, renames) to the disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def atomic_write(path: str, data: str | bytes) -> None:
    """Replace ``path`` with ``data``: temporary file, flush, fsync, rename, fsync of the directory."""
    tmp = path + TMP_SUFFIX
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(_parent(path))


def write_json(path: str, obj, *, sort_keys: bool = False) -> None:
    """:func:`atomic_write` of ``obj`` as JSON indented by 2 (keys sorted when asked)."""
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=sort_keys))


def append_line(path: str, line: str) -> None:
    """Append one line (its newline included) and fsync; a new file's directory entry is fsynced too."""
    new = not os.path.exists(path)
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    if new:
        fsync_dir(_parent(path))


def install(tmp: str, path: str) -> None:
    """Put the finished file ``tmp`` in place of ``path``: fsync it, rename it, fsync the directory."""
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(_parent(path))


def move(src: str, dst: str) -> None:
    """Rename a file or folder and fsync the directories whose entries changed."""
    os.rename(src, dst)
    fsync_dir(_parent(dst))
    if _parent(src) != _parent(dst):
        fsync_dir(_parent(src))
