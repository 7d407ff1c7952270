"""The audited frameworks: the package, its pinned version, its environment and its adapter.

A framework's environment is built from its own requirements file by ``framework_audit/build_env.sh``.
The versions here must equal the pins in those files (tests/conformance/test_conformance_matrix.py checks it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    key: str  # adapter module name, raw result file name
    package: str  # distribution name as pip spells it
    version: str
    requirements: str  # repository-relative
    venv: str  # repository-relative
    layered: bool = True  # reads torch from framework_audit/.venv-torch (build_env.sh) instead of its own copy
    build_script: str = ""  # repository-relative; build_env.sh hands the build to it (an environment built otherwise)
    commit: str = ""  # a framework installed from its repository at this commit (``version`` is its short form)

    @property
    def label(self) -> str:
        return f"{self.package} {self.version}"


def _own(key: str, package: str, version: str) -> Framework:
    return Framework(key, package, version, f"framework_audit/requirements-{key}.txt", f"framework_audit/.venv-{key}")


FRAMEWORKS = (
    # TRL's environment is the TRL leg's (tools/ci_trl.sh): built once, used by both.
    Framework("trl", "trl", "1.16.0", "requirements-trl.txt", "benchmarks/.venv-trl", layered=False),
    _own("verl", "verl", "0.9.1"),
    _own("ms_swift4", "ms-swift", "4.6.0"),
    _own("ms_swift3", "ms-swift", "3.12.2"),
    _own("areal", "areal", "1.0.4"),
    _own("skyrl_train", "skyrl-train", "0.3.1"),
    _own("liger_kernel", "liger-kernel", "0.8.5"),
    _own("trinity_rft", "trinity-rft", "0.6.0"),
    _own("twinkle_kit", "twinkle-kit", "0.5.1"),
    # Axolotl's environment is TRL's with Axolotl's pins over it (build_axolotl.sh), torch from TRL's.
    Framework("axolotl", "axolotl", "0.21.0", "framework_audit/requirements-axolotl.txt", "framework_audit/.venv-axolotl",
              layered=False, build_script="framework_audit/build_axolotl.sh"),
    # skyrl (the renamed SkyRL) requires Python 3.12: its own environment and torch (build_skyrl.sh).
    Framework("skyrl", "skyrl", "0.4.0", "framework_audit/requirements-skyrl.txt", "framework_audit/.venv-skyrl",
              layered=False, build_script="framework_audit/build_skyrl.sh"),
    # EasyR1 is on no package index: installed from its repository's pinned commit (build_easyr1.sh).
    Framework("easyr1", "EasyR1", "b44b311", "framework_audit/requirements-easyr1.txt", "framework_audit/.venv-easyr1",
              build_script="framework_audit/build_easyr1.sh", commit="b44b311b669bf1fd1aa2fc36f2251482ba33cb16"),
)

BY_KEY = {f.key: f for f in FRAMEWORKS}


def framework(key: str) -> Framework:
    if key not in BY_KEY:
        raise ValueError(f"unknown framework {key!r}; known: {', '.join(BY_KEY)}")
    return BY_KEY[key]
