#!/usr/bin/env bash
# The TRL leg: build TRL's own environment from requirements-trl.txt, then run tests/integrations/test_trl_*.py there
# with TRL required (a missing TRL fails instead of skipping). Usage: bash tools/ci_trl.sh [pytest args | --build-only]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
VENV=${SAPO_LAB_TRL_VENV:-benchmarks/.venv-trl}
STAMP=$VENV/.installed
if [ ! -f "$STAMP" ] || [ requirements-trl.txt -nt "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
    test -x "$VENV/bin/python" || python3 -m venv "$VENV"
    # torch alone first: the CPU wheel, before anything could ask for another build
    "$VENV/bin/python" -m pip install -q "$(grep '^torch==' requirements-trl.txt)"
    "$VENV/bin/python" -m pip install -q -r requirements-trl.txt
    "$VENV/bin/python" -m pip install -q --no-deps -e .
    touch "$STAMP"
fi
echo "TRL environment ready in $(( $(date +%s) - start )) s"
if [ "${1:-}" = "--build-only" ]; then exit 0; fi
export PYTHONPATH=$PWD SAPO_LAB_REQUIRE_TRL=1 OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
"$VENV/bin/python" -m pytest -q tests/integrations/test_trl_mapping.py tests/integrations/test_trl_equivalence.py tests/integrations/test_trl_export.py tests/integrations/test_trl_settings_reach.py tests/integrations/test_trl_diagnostics.py "$@"
echo "TRL leg wall time: $(( $(date +%s) - start )) s"
