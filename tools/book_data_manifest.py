"""Write book_data.sha256 (SHA-256 and size of every committed file a chapter may fetch) and pin its digest.

    python tools/book_data_manifest.py          # rewrite the manifest and sapo_lab.book_data.MANIFEST_SHA256
    python tools/book_data_manifest.py --check  # exit 1 if either is out of date

It reads the files as committed (HEAD): commit results first, then run it and commit its two files.
Run it whenever results/, experiments/ or tests/studies/test_results_reproduce.py change: a chapter running
outside the repository checks every file it fetches against this manifest (sapo_lab/book_data.py),
so a stale manifest would fail there; tests/book_data/test_book_data.py fails here first.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COVERED = ["results", "experiments", "tests/studies/test_results_reproduce.py"]
MODULE = ROOT / "sapo_lab" / "book_data.py"
HEADER = "# SHA256 SIZE PATH of every committed file a chapter may fetch (tools/book_data_manifest.py)\n"


def manifest_text() -> str:
    """The manifest of the files as committed (HEAD): what a clone of the repository holds."""
    listed = subprocess.run(["git", "ls-tree", "-r", "-z", "HEAD", "--", *COVERED], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    entries = sorted((line.split("\t", 1)[1], line.split()[2]) for line in listed if line)
    blobs = subprocess.run(["git", "cat-file", "--batch"], cwd=ROOT, capture_output=True, check=True,
                           input="".join(f"{oid}\n" for _, oid in entries).encode()).stdout
    lines, at = [], 0
    for path, _ in entries:
        header_end = blobs.index(b"\n", at)
        size = int(blobs[at:header_end].split()[2])
        data = blobs[header_end + 1:header_end + 1 + size]
        at = header_end + size + 2
        lines.append(f"{hashlib.sha256(data).hexdigest()} {size} {path}\n")
    return HEADER + "".join(lines)


def module_text(digest: str) -> str:
    source = MODULE.read_text()
    new, count = re.subn(r'^MANIFEST_SHA256 = "[0-9a-f]{64}"$', f'MANIFEST_SHA256 = "{digest}"', source, flags=re.M)
    assert count == 1, "sapo_lab/book_data.py lost its MANIFEST_SHA256 line"
    return new


def main(argv: list[str]) -> int:
    text = manifest_text()
    digest = hashlib.sha256(text.encode()).hexdigest()
    target = ROOT / "book_data.sha256"
    current = target.read_text() if target.is_file() else ""
    module = module_text(digest)
    if "--check" in argv:
        if current != text or module != MODULE.read_text():
            print("book_data.sha256 or MANIFEST_SHA256 is out of date: run python tools/book_data_manifest.py")
            return 1
        return 0
    target.write_text(text)
    MODULE.write_text(module)
    print(f"book_data.sha256: {text.count(chr(10)) - 1} files, sha256 {digest[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
