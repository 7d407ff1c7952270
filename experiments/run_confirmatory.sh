#!/usr/bin/env bash
# The confirmatory studies in their declared priority order, two processes per phase
# (one per core; the 10 seeds split even/odd, so each process builds its own cold starts).
# Resumable: rerun after an interruption and finished runs are skipped, partial ones resumed.
# NICE=10 lets interactive work go first on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
phase() {  # phase STUDY METHODS
    for shard in 0/2 1/2; do
        nice -n "${NICE:-0}" "$PY" -m sapo_lab study "experiments/$1.json" --methods "$2" --shard "$shard" --no-progress &
    done
    wait
}
phase confirm_addition grpo,sapo
phase confirm_scratchpad grpo,sapo
phase confirm_addition sapo_directional,gauss
phase confirm_scratchpad sapo_directional,gauss
phase confirm_addition sapo_tau_x0.5,sapo_tau_x2,grpo_eps0.1,grpo_eps0.3
phase confirm_addition gspo
phase confirm_scratchpad gspo
