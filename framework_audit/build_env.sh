#!/usr/bin/env bash
# Build one framework's environment from its pinned requirements file: bash framework_audit/build_env.sh KEY
# (KEY as in framework_audit/frameworks.py). Rebuilt only when the requirements file is newer than the stamp.
#
# Layered environments install the framework's pins with --no-deps (exactly the listed packages, nothing a
# framework's metadata would pull in) and read torch from the shared base framework_audit/.venv-torch through a
# .pth file, so the 900 MB CPU build of torch is installed once. The build time and size go to .build.json.
set -euo pipefail
cd "$(dirname "$0")/.."
KEY=${1:?usage: bash framework_audit/build_env.sh KEY}
spec=$(python3 -c "
import sys; sys.path.insert(0, '.')
from framework_audit.frameworks import framework
try:
    f = framework(sys.argv[1])
except ValueError as e:
    sys.exit(f'error: {e}')
print(f.venv, f.requirements, int(f.layered), f.build_script or '-')" "$KEY")
read -r VENV REQ LAYERED SCRIPT <<< "$spec"
# An environment with its own recipe (built over another environment, or from a pinned source tree)
if [ "$SCRIPT" != "-" ]; then exec bash "$SCRIPT"; fi
quiet() { grep -v "^WARNING: Location" || true; }  # pip's notes on this machine's empty local indexes

record() {  # record VENV SECONDS
    local mb
    mb=$(du -sm "$1" | cut -f1)
    printf '{"build_seconds": %s, "size_mb": %s}\n' "$2" "$mb" > "$1/.build.json"
    echo "environment $1: built in $2 s, $mb MB"
}

fresh() {  # fresh VENV REQUIREMENTS...: true when a requirements file is newer than the stamp
    local v=$1; shift
    [ -f "$v/.installed" ] || return 1
    for r in "$@"; do [ "$r" -nt "$v/.installed" ] && return 1; done
    return 0
}

BASE=framework_audit/.venv-torch
BASE_REQ=framework_audit/requirements-torch.txt
if [ "$LAYERED" = 1 ] && ! fresh "$BASE" "$BASE_REQ"; then
    start=$(date +%s)
    rm -rf "$BASE" && python3 -m venv "$BASE"
    "$BASE/bin/python" -m pip install -q --no-deps -r "$BASE_REQ" 2>&1 | quiet
    touch "$BASE/.installed"
    record "$BASE" $(( $(date +%s) - start ))
fi

if [ "$LAYERED" = 1 ]; then
    if fresh "$VENV" "$REQ" "$BASE_REQ"; then echo "$KEY environment: up to date ($VENV)"; exit 0; fi
    start=$(date +%s)
    rm -rf "$VENV" && python3 -m venv --without-pip "$VENV"
    site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    base_site=$("$BASE/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    echo "$base_site" > "$site/_conformance_torch.pth"
    # Some wheels declare a Python they were not built for (a '# pip:' line in the file says so, and why).
    flags=$(sed -n 's/^# pip: //p' "$REQ")
    # shellcheck disable=SC2086
    "$BASE/bin/python" -m pip --python "$VENV/bin/python" install -q --no-deps $flags -r "$REQ" 2>&1 | quiet
else
    # Its own torch: the TRL leg's environment, built exactly as tools/ci_trl.sh builds it (same stamp).
    if fresh "$VENV" "$REQ" pyproject.toml; then echo "$KEY environment: up to date ($VENV)"; exit 0; fi
    start=$(date +%s)
    test -x "$VENV/bin/python" || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q "$(grep '^torch==' "$REQ")" 2>&1 | quiet
    "$VENV/bin/python" -m pip install -q -r "$REQ" 2>&1 | quiet
    "$VENV/bin/python" -m pip install -q --no-deps -e . 2>&1 | quiet
fi
touch "$VENV/.installed"
record "$VENV" $(( $(date +%s) - start ))
