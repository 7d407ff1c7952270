"""Shared setup of the TRL tests: skip without TRL, unless the TRL CI leg requires it."""

import os

import pytest


def require_trl():
    """Import and return ``trl``; skip the module when it is missing, fail when SAPO_LAB_REQUIRE_TRL=1."""
    try:
        import trl
    except ImportError:
        if os.environ.get("SAPO_LAB_REQUIRE_TRL") == "1":
            raise
        pytest.skip(
            "TRL is not installed here; tools/ci_trl.sh builds its own environment and runs these tests",
            allow_module_level=True,
        )
    return trl
