"""Which heavy modules a fresh interpreter holds after running some code against a copy of the package.

Imported as ``from _heavy import heavy_modules_after`` (``tests/`` is on ``sys.path`` through ``conftest.py``).
"""

import pathlib
import subprocess
import sys


def heavy_modules_after(code: str, heavy: tuple[str, ...], package_parent: pathlib.Path, *argv: str) -> list[str]:
    """The names in ``heavy`` found in ``sys.modules`` after ``code`` runs in a fresh interpreter.

    It runs from ``package_parent``, so that the ``sapo_lab`` folder there (the checkout's or a planted copy) is
    the one imported; ``argv`` reaches the code as ``sys.argv[1:]``.
    """
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe, *argv], check=True, cwd=package_parent,
                         capture_output=True, text=True)
    return [m for m in out.stdout.strip().split(",") if m]
