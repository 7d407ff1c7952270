"""Rename the flat keys of every ``metrics.jsonl`` under the given folders to today's namespaced keys.

    python tools/migrate_metric_names.py results [runs ...]

Each file is read by the one metrics reader (which renames a flat row with
:func:`sapo_lab.runs.metric_names.migrate_row`) and written back atomically; a file that is
already namespaced is left untouched, so running it twice changes nothing. Values are never
recomputed: a renamed row holds the numbers the run logged.
"""

import json
import sys
from pathlib import Path

from sapo_lab.runs.durable import atomic_write
from sapo_lab.runs.metric_names import is_flat
from sapo_lab.runs.run_folder import read_metrics


def migrate_file(path: Path) -> bool:
    """Rewrite ``path`` under the namespaced keys; ``True`` when it had flat rows."""
    with open(path) as f:
        flat = any(is_flat(json.loads(line)) for line in f if line.strip())
    if not flat:
        return False
    log = read_metrics(str(path))
    if log.torn_last_line:
        raise SystemExit(f"{path}: a torn last line; finish or resume that run before migrating it")
    atomic_write(str(path), "".join(log.lines))
    return True


def main(folders: list[str]) -> int:
    files = sorted(p for folder in folders for p in Path(folder).rglob("metrics.jsonl"))
    changed = sum(migrate_file(p) for p in files)
    print(f"{changed} of {len(files)} metrics files renamed to namespaced keys")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["results"]))
