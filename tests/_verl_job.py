"""Reading an exported verl job as its user's shell runs it: the Hydra overrides bash hands to ``main_ppo``.

Shared by tests/integrations/test_verl_export.py (main environment) and
tests/integrations/test_verl_config.py (verl's environment).
"""

from __future__ import annotations

import os
import subprocess

# Runs the exported script's own lines up to the array, then prints each element as bash expanded it.
_PRINT_ARRAY = r"""
set -euo pipefail
HERE=$(cd "$(dirname "$1")" && pwd)
NGPUS=${NGPUS:-1}
NNODES=${NNODES:-1}
eval "$(sed -n '/^OVERRIDES=(/,/^)/p' "$1")"
printf '%s\n' "${OVERRIDES[@]}"
"""


def script_overrides(script: str, env: dict | None = None) -> list[str]:
    """The override arguments of the exported run_verl.sh, exactly as bash passes them to verl."""
    out = subprocess.run(["bash", "-c", _PRINT_ARRAY, "bash", os.path.abspath(script)], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def commented_lines(script: str) -> list[tuple[str, str]]:
    """(array element as written, its comment) for each line of the OVERRIDES array."""
    with open(script) as f:
        text = f.read()
    body = text.split("OVERRIDES=(\n", 1)[1].split("\n)\n", 1)[0]
    pairs = []
    for line in body.splitlines():
        element, sep, comment = line.strip().rpartition("  # ")
        assert sep, f"override line without a comment: {line!r}"
        pairs.append((element.strip(), comment))
    return pairs


def as_dict(overrides: list[str]) -> dict:
    """key -> value text (Hydra's quotes removed); a key given twice is an error in the export."""
    out = {}
    for item in overrides:
        key, _, value = item.partition("=")
        assert key not in out, f"override {key} given twice"
        out[key] = value[1:-1] if value[:1] == value[-1:] == "'" else value
    return out
