#!/usr/bin/env bash
# Build framework_audit/.venv-axolotl: TRL's environment (benchmarks/.venv-trl, read through a .pth file) plus
# requirements-axolotl.txt installed with --no-deps, for framework_audit/settings_reach_axolotl.py and
# tests/integrations/test_axolotl_settings_reach.py. Rebuilt only when a requirements file is newer than the stamp.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=framework_audit/.venv-axolotl
REQ=framework_audit/requirements-axolotl.txt
BASE=benchmarks/.venv-trl
if [ ! -f "$BASE/.installed" ]; then
    echo "error: TRL's environment is missing: run bash tools/ci_trl.sh --build-only first" >&2; exit 2
fi
if [ -f "$VENV/.installed" ] && [ ! "$REQ" -nt "$VENV/.installed" ] && [ ! "$BASE/.installed" -nt "$VENV/.installed" ]; then
    echo "Axolotl environment: up to date ($VENV)"; exit 0
fi
start=$(date +%s)
rm -rf "$VENV" && python3 -m venv --without-pip "$VENV"
purelib() { "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
base_site=$(cd "$(purelib "$BASE")" && pwd)
echo "$base_site" > "$(purelib "$VENV")/_trl_environment.pth"
# A wheel that declares a Python it was not built for: a '# pip:' line in the file says so, and why.
flags=$(sed -n 's/^# pip: //p' "$REQ")
# shellcheck disable=SC2086
"$BASE/bin/python" -m pip --python "$VENV/bin/python" install -q --no-deps $flags -r "$REQ" 2>&1 \
    | { grep -v "^WARNING: Location" || true; }
touch "$VENV/.installed"
mb=$(du -sm "$VENV" | cut -f1)
seconds=$(( $(date +%s) - start ))
printf '{"build_seconds": %s, "size_mb": %s}\n' "$seconds" "$mb" > "$VENV/.build.json"
echo "environment $VENV: built in $seconds s, $mb MB (plus $BASE)"
