"""Fail unless the running environment holds exactly the versions pinned in a constraints file.

The compatibility leg (``make min-test``) runs this first, so that a later install step that
quietly upgraded a package cannot make the leg test newer versions than it claims.
"""

import re
import sys
from importlib.metadata import PackageNotFoundError, version


def main(path: str) -> int:
    """Compare each ``name==version`` line of ``path`` with the installed distribution."""
    bad = []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, pinned = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line).groups()
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "missing"
        if installed.split("+")[0] != pinned.split("+")[0]:
            bad.append(f"{name}: pinned {pinned}, installed {installed}")
    if bad:
        print("not the minimum versions: " + "; ".join(bad), file=sys.stderr)
        return 1
    print(f"minimum versions installed: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
