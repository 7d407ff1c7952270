"""The folder an export writes into: checked before anything is written, so that no user file is replaced."""

from __future__ import annotations

import os


def prepare_output_folder(output_dir: str, names) -> None:
    """Create ``output_dir`` for the files (or folders) ``names``, or refuse in one line (``ValueError``): an empty
    path, a path that is a file, a folder already holding one of ``names`` (a user's README.md or an earlier
    export alike), or a folder that cannot be created."""
    if not output_dir or not output_dir.strip():
        raise ValueError("--output-dir must name a folder, got an empty path")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ValueError(f"--output-dir {output_dir} is a file, not a folder")
    taken = sorted(n for n in names if os.path.lexists(os.path.join(output_dir, n)))
    if taken:
        raise ValueError(f"{output_dir} already holds {', '.join(taken)}, which the export would replace; "
                         "choose another --output-dir")
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--output-dir {output_dir} cannot be created: {exc.strerror or exc}") from None
