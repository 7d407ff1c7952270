"""Reading a JSON object that a user wrote (a config file, a study declaration), with one-line errors."""

from __future__ import annotations

import json
import os


def read_json_object(path: str, what: str) -> dict:
    """The JSON object in the file at ``path``; a one-line ``ValueError`` naming ``what`` and the path otherwise."""
    if not os.path.isfile(path):
        raise ValueError(f"{what} {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} {path!r} is not valid JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {path!r} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except OSError as exc:
        raise ValueError(f"{what} {path!r} cannot be read: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path!r} must hold a JSON object")
    return data
