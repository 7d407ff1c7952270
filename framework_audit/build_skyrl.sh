#!/usr/bin/env bash
# Build framework_audit/.venv-skyrl: a Python 3.12 environment (skyrl 0.4.0 requires Python >= 3.12) with
# requirements-skyrl.txt installed with --no-deps, torch included (its own copy: the shared torch base is built
# for Python 3.11). Rebuilt only when the requirements file is newer than the stamp. About 4 GB: torch's
# Python 3.12 build on the index is its CUDA build, whose libraries come with it. The interpreter is
# $PYTHON312, default python3.12 or pyenv's 3.12.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=framework_audit/.venv-skyrl
REQ=framework_audit/requirements-skyrl.txt
is312() { "$1" -c "import sys; sys.exit(sys.version_info[:2] != (3, 12))" 2>/dev/null; }
PY=${PYTHON312:-}
if [ -z "$PY" ]; then
    for candidate in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python; do
        if is312 "$candidate"; then PY=$candidate; break; fi
    done
fi
if [ -f "$VENV/.installed" ] && [ ! "$REQ" -nt "$VENV/.installed" ]; then
    echo "skyrl environment: up to date ($VENV)"; exit 0
fi
if [ -z "$PY" ] || ! is312 "$PY"; then
    echo "error: skyrl's environment needs Python 3.12: set PYTHON312 to its interpreter" >&2; exit 2
fi
start=$(date +%s)
rm -rf "$VENV" && "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --no-deps -r "$REQ" 2>&1 | { grep -v "^WARNING: Location" || true; }
touch "$VENV/.installed"
mb=$(du -sm "$VENV" | cut -f1)
seconds=$(( $(date +%s) - start ))
printf '{"build_seconds": %s, "size_mb": %s}\n' "$seconds" "$mb" > "$VENV/.build.json"
echo "environment $VENV: built in $seconds s, $mb MB"
