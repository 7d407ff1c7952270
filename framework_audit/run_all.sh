#!/usr/bin/env bash
# Build each framework's environment, audit it there and write results/conformance/matrix.{json,md}.
# Usage: bash framework_audit/run_all.sh [KEY ...]   (default: every framework of framework_audit/frameworks.py)
# The raw results go to results/conformance/raw/KEY.json; frameworks not named keep their committed result, and so
# does one whose source its build script cannot find (exit 3: EasyR1 without its clone, build_easyr1.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
keys=("$@")
if [ ${#keys[@]} -eq 0 ]; then
    read -r -a keys < <("$PY" -c "from framework_audit.frameworks import FRAMEWORKS; print(*[f.key for f in FRAMEWORKS])")
fi
for key in "${keys[@]}"; do
    start=$(date +%s)
    rc=0; bash framework_audit/build_env.sh "$key" || rc=$?
    if [ "$rc" = 3 ]; then echo "$key: its source is not here; its committed result is kept"; continue; fi
    [ "$rc" = 0 ] || exit "$rc"
    venv=$("$PY" -c "import sys; from framework_audit.frameworks import framework; print(framework(sys.argv[1]).venv)" "$key")
    OMP_NUM_THREADS=1 "$venv/bin/python" -m framework_audit.run "$key" --out results/conformance/raw
    echo "$key: environment and audit in $(( $(date +%s) - start )) s"
done
"$PY" -m framework_audit.aggregate
