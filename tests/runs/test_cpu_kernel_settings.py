"""The CPU kernel settings (sapo_lab/runs/kernels.py): named, applied only before torch loads, recorded, and
kept apart in the cold-start cache."""

import os
import subprocess
import sys

import pytest

from sapo_lab.runs import kernels
from sapo_lab.runs.kernels import KERNEL_SETTINGS, VARIABLES, current_kernel_setting, kernel_setting_env


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(extra)
    return env


def test_the_setting_in_force_is_read_from_the_environment(monkeypatch):
    for k in VARIABLES:
        monkeypatch.delenv(k, raising=False)
    assert current_kernel_setting() == "native"
    for name, env in KERNEL_SETTINGS.items():
        for k in VARIABLES:
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert current_kernel_setting() == name  # catches two settings read as one
    monkeypatch.setenv("MKL_CBWR", "AVX512")  # a mix no setting names
    assert current_kernel_setting() is None


def test_an_unknown_setting_is_one_line():
    with pytest.raises(ValueError, match="unknown kernel setting 'avx9'; one of"):
        kernel_setting_env("avx9")


def test_a_setting_is_refused_once_torch_has_loaded():
    """torch reads the variables once: switching afterwards would be silently ignored (catches the refusal dropped)."""
    code = ("import torch\nfrom sapo_lab.runs.kernels import apply_kernel_setting\n"
            "try:\n    apply_kernel_setting('avx2')\nexcept ValueError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, check=True)
    assert out.stdout.startswith("refused: kernel setting 'avx2' must be chosen before torch loads")
    # before torch, the same call sets the variables (catches a setting that never reaches the environment)
    code = ("from sapo_lab.runs.kernels import apply_kernel_setting; import os\napply_kernel_setting('scalar')\n"
            "import torch\nprint(os.environ['ATEN_CPU_CAPABILITY'], os.environ['MKL_CBWR'])")
    out = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["default", "COMPATIBLE"]


def test_the_same_setting_again_is_accepted_after_torch(monkeypatch):
    import torch  # noqa: F401  (loaded, as in any test process)

    for k in VARIABLES:
        monkeypatch.delenv(k, raising=False)
    kernels.apply_kernel_setting("native")  # already in force: nothing to refuse


def test_non_native_cold_starts_are_cached_apart(monkeypatch):
    from sapo_lab.training.cold_start import _kernel_subfolder

    for k in VARIABLES:
        monkeypatch.delenv(k, raising=False)
    assert _kernel_subfolder() == ()  # native keeps the cache path every committed study used
    for k, v in KERNEL_SETTINGS["avx2"].items():
        monkeypatch.setenv(k, v)
    assert _kernel_subfolder() == ("kernels-avx2",)  # catches an avx2 run loading a native cold start
