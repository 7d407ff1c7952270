"""Which CPU kernels a run computes with: the settings that choose them, and which one this process uses.

CPUs with other vector units (AVX-512 or not) run other matmul and reduction kernels, whose float results
differ in the last bits; over a cold start's updates that changes sampled tokens, so a run reproduces bit
for bit only on the kernels that made it. Standard library only: the trainer's cold-start cache and the
study runner read it before torch loads.
"""

from __future__ import annotations

import os
import sys

# Environment settings that choose which CPU kernels torch and MKL run, read once when they load.
# "native" lets each pick the widest vector unit; "avx2" caps both at AVX2, the unit every x86-64 CPU
# since 2013 has (an AVX-512 machine then gives an AVX2-only one's fingerprint and, measured, its cold
# start and first rollout steps' decisions, but not every float bit: tests/studies/test_results_reproduce.py);
# "scalar" turns torch's vectorized kernels off and asks MKL for its conditional-numerical-reproducibility path, the candidate
# for the same bits on every x86-64 CPU.
# benchmarks/kernel_portability.py measures what each costs; results/kernel_fingerprints.json records
# the fingerprint each gives on every CPU kind it was measured on.
KERNEL_SETTINGS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "scalar": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}
VARIABLES = sorted({k for env in KERNEL_SETTINGS.values() for k in env})


def kernel_setting_env(name: str) -> dict[str, str]:
    """The environment variables of one of :data:`KERNEL_SETTINGS`; a one-line ``ValueError`` for another name."""
    if name not in KERNEL_SETTINGS:
        raise ValueError(f"unknown kernel setting {name!r}; one of {sorted(KERNEL_SETTINGS)}")
    return KERNEL_SETTINGS[name]


def apply_kernel_setting(name: str) -> None:
    """Set ``name``'s variables in this process. torch and MKL read them once, when they load: refused
    (one-line ``ValueError``) once torch is imported, since the setting would be silently ignored."""
    env = kernel_setting_env(name)
    if current_kernel_setting() == name:
        return
    if "torch" in sys.modules:
        here = {k: os.environ[k] for k in VARIABLES if k in os.environ}
        raise ValueError(f"kernel setting {name!r} must be chosen before torch loads; torch already runs with "
                         f"{here or 'none of ' + ', '.join(VARIABLES)} (setting {current_kernel_setting() or 'a mix'}): "
                         f"start the process with {env or 'none of them'} set")
    for k in VARIABLES:
        os.environ.pop(k, None)
    os.environ.update(env)


def current_kernel_setting() -> str | None:
    """The name of the :data:`KERNEL_SETTINGS` entry this process's environment selects (``None``: a mix)."""
    here = {k: os.environ[k] for k in VARIABLES if k in os.environ}
    for name, env in KERNEL_SETTINGS.items():
        if here == env:
            return name
    return None
