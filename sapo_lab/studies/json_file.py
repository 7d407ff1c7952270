"""The one way a study writes a JSON file: a temporary file, then a rename."""

from __future__ import annotations

import json
import os


def write_json(path: str, obj) -> None:
    """``obj`` as indented JSON at ``path``; a reader sees the old file or the new one."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)
