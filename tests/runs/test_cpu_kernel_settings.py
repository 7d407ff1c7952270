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


def test_switching_setting_leaves_only_the_new_settings_variables():
    """Catches a switch that adds the new setting's variables over the old ones: from avx2, native must leave
    none set (else MKL stays capped while the run is recorded as native), and scalar must replace both."""
    code = ("import os\nfrom sapo_lab.runs.kernels import apply_kernel_setting, current_kernel_setting\n"
            "for name in ('native', 'scalar'):\n"
            "    os.environ.update(ATEN_CPU_CAPABILITY='avx2', MKL_CBWR='AVX2')\n"
            "    apply_kernel_setting(name)\n"
            "    print(name, current_kernel_setting(), os.environ.get('ATEN_CPU_CAPABILITY'), os.environ.get('MKL_CBWR'))")
    out = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["native native None None", "scalar scalar default COMPATIBLE"]


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return {flag for line in f if line.startswith("flags") for flag in line.split(":", 1)[1].split()}
    except OSError:
        return set()


@pytest.mark.parametrize(("name", "capability"), [("avx2", "AVX2"), ("scalar", "DEFAULT")])
def test_torch_runs_the_kernels_each_setting_names(name, capability):
    """Observed in torch itself, not read from KERNEL_SETTINGS: torch ignores a value it does not know (with only a
    warning), so a misspelt setting ('AVX2' as MKL spells it, or 'scalar') would run the widest kernels while the
    run is recorded under the setting's name."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64") or (name == "avx2" and "avx2" not in _cpu_flags()):
        pytest.skip(f"the {name} setting's kernels need an x86-64 CPU{' with AVX2' if name == 'avx2' else ''}")
    code = (f"from sapo_lab.runs.kernels import apply_kernel_setting\napply_kernel_setting({name!r})\n"
            "import torch\nprint(torch.backends.cpu.get_cpu_capability())")
    out = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == capability and "invalid value" not in out.stderr, out.stderr
