#!/usr/bin/env bash
# The conformance leg: rebuild the environments of the frameworks that fit CI's budget, rerun their audit
# and fail if the matrix they give differs from the committed results/conformance/matrix.json (dates and
# timings aside). The other frameworks' committed results say when they were last run (`make conformance`);
# tests/conformance/test_conformance_matrix.py checks the committed file is consistent. Usage: bash tools/ci_conformance.sh
# [--build-only: only build the environments]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# The frameworks whose environment and audit fit CI's budget for this leg (environments are built beside
# `make test` by --build-only; the audits take about a minute on 2 cores, each one's time is printed below):
# TRL reuses the TRL leg's environment, Liger-Kernel needs only the shared torch base, skyrl-train,
# Trinity-RFT and verl add ray and a few small packages (verl: about 50 s to build, 415 MB), twinkle-kit its loss
# module's imports (datasets, pandas, pyarrow: 20 s to build, 380 MB). AReaL and both
# ms-swift versions need 3-5 minutes and 600-720 MB each (results/conformance/matrix.md: build times, sizes,
# and when each was last run); their findings are held to the upstream lines and SHA-256 their adapters were
# read from (tests/conformance/test_conformance_matrix.py), and a changed file fails `make conformance` when they are rerun.
# So are the three built otherwise: Axolotl (its pins over TRL's environment: 36-253 s to build, 20-83 s to
# audit), skyrl 0.4.0 (Python 3.12 with torch's CUDA build: 6 minutes, 4.4 GB) and EasyR1 (seconds, but built
# from a clone of its repository, which CI does not have).
FRAMEWORKS=${SAPO_LAB_CONFORMANCE_FRAMEWORKS:-"trl liger_kernel skyrl_train trinity_rft verl twinkle_kit"}
if [ "${1:-}" = "--build-only" ]; then
    for key in $FRAMEWORKS; do bash framework_audit/build_env.sh "$key"; done
    exit 0
fi
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
for key in $FRAMEWORKS; do
    t0=$(date +%s)
    bash framework_audit/build_env.sh "$key"
    venv=$(.venv/bin/python -c "import sys; from framework_audit.frameworks import framework; print(framework(sys.argv[1]).venv)" "$key")
    OMP_NUM_THREADS=1 "$venv/bin/python" -m framework_audit.run "$key" --out "$fresh"
    echo "conformance $key: $(( $(date +%s) - t0 )) s"
done
.venv/bin/python -m framework_audit.aggregate --raw "$fresh" --check
echo "conformance leg wall time: $(( $(date +%s) - start )) s"
