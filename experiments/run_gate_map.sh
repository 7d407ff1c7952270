#!/usr/bin/env bash
# The gate map (experiments/gate_map.json) in its declared priority order, two processes per phase
# (one per core; the 10 seeds split even/odd, so each process builds its own cold starts).
# The primary questions are complete after phase 4 (140 runs); phases 5-7 fill in the rest of the map.
# Resumable: rerun after an interruption and finished runs are skipped, partial ones resumed.
# Meant for a machine with nothing else running: the declared time estimate assumes two busy cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
phase() {  # phase METHODS
    for shard in 0/2 1/2; do
        nice -n "${NICE:-0}" "$PY" -m sapo_lab study experiments/gate_map.json --methods "$1" --shard "$shard" --no-progress &
    done
    wait
}
lr() {  # lr RATE M...: every gate at learning rate RATE and each staleness M
    local rate=$1 out=() m g
    shift
    for m in "$@"; do for g in grpo sapo sapo_tau_x3 sapo_tau_x8.81; do out+=("${g}_lr${rate}_M${m}"); done; done
    local IFS=,
    echo "${out[*]}"
}
phase grpo_lr2e-4_M8,sapo_lr2e-4_M8                                    # (a)-(c) share these
phase sapo_tau_x8.81_lr2e-4_M8,sapo_tau_x3_lr2e-4_M8                   # (a) tight gates
phase sapo_lr5e-5_M8,sapo_lr1e-4_M8,grpo_lr5e-5_M8,grpo_lr1e-4_M8      # (b) learning-rate tuning arm
phase grpo_lr2e-4_M2,sapo_lr2e-4_M2,grpo_lr2e-4_M4,sapo_lr2e-4_M4,grpo_lr2e-4_M16,sapo_lr2e-4_M16  # (c) staleness
phase sapo_tau_x3_lr2e-4_M2,sapo_tau_x8.81_lr2e-4_M2,sapo_tau_x3_lr2e-4_M4,sapo_tau_x8.81_lr2e-4_M4,sapo_tau_x3_lr2e-4_M16,sapo_tau_x8.81_lr2e-4_M16
phase sapo_tau_x3_lr5e-5_M8,sapo_tau_x8.81_lr5e-5_M8,sapo_tau_x3_lr1e-4_M8,sapo_tau_x8.81_lr1e-4_M8
phase "$(lr 5e-5 2 4 16),$(lr 1e-4 2 4 16)"
