#!/usr/bin/env bash
# Build each framework's environment, audit it there and write results/conformance/matrix.{json,md}.
# Usage: bash framework_audit/run_all.sh [KEY ...]   (default: every framework of framework_audit/frameworks.py)
# The raw results go to results/conformance/raw/KEY.json; frameworks not named keep their committed result.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
keys=("$@")
if [ ${#keys[@]} -eq 0 ]; then
    read -r -a keys < <("$PY" -c "from framework_audit.frameworks import FRAMEWORKS; print(*[f.key for f in FRAMEWORKS])")
fi
for key in "${keys[@]}"; do
    start=$(date +%s)
    bash framework_audit/build_env.sh "$key"
    venv=$("$PY" -c "import sys; from framework_audit.frameworks import framework; print(framework(sys.argv[1]).venv)" "$key")
    OMP_NUM_THREADS=1 "$venv/bin/python" -m framework_audit.run "$key" --out results/conformance/raw
    echo "$key: environment and audit in $(( $(date +%s) - start )) s"
done
"$PY" -m framework_audit.aggregate
