#!/usr/bin/env bash
# The verl export leg: build verl 0.9.1's pinned environment with Hydra (framework_audit/build_verl_hydra.sh, the
# environment of the settings-reach audit framework_audit/settings_reach_verl.py; rebuilt only when a requirements
# file changed), then run there, with verl required, tests/integrations/test_verl_config.py (the job `export-verl` writes in the
# main environment, .venv, composed with verl's own config, validated by verl, its reward and prompts fed to verl's
# own code) and tests/integrations/test_verl_settings_reach.py (the audit's findings about where verl reads the temperatures).
# No GPU. Usage: bash tools/ci_verl_export.sh [pytest args | --build-only]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash framework_audit/build_verl_hydra.sh
echo "verl environment ready in $(( $(date +%s) - start )) s"
if [ "${1:-}" = "--build-only" ]; then exit 0; fi
PY=framework_audit/.venv-verl-hydra/bin/python
# SAPO_LAB_REQUIRE_VERL: a missing verl or Hydra fails the leg instead of skipping the test module.
export PYTHONPATH=$PWD OMP_NUM_THREADS=1 SAPO_LAB_REQUIRE_VERL=1 SAPO_LAB_MAIN_PYTHON=${SAPO_LAB_MAIN_PYTHON:-$PWD/.venv/bin/python}
"$PY" -m pytest -q -p no:cacheprovider -W ignore::UserWarning -W ignore::FutureWarning tests/integrations/test_verl_config.py \
    tests/integrations/test_verl_settings_reach.py "$@"
echo "verl export leg wall time: $(( $(date +%s) - start )) s"
