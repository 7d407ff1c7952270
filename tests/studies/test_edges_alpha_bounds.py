"""A study's declared alpha on both sides of its open interval (0, 1)."""
import json
from pathlib import Path

import pytest

from sapo_lab.studies.spec import load_declaration

ROOT = Path(__file__).resolve().parents[2]
DECLARATION = ROOT / "experiments" / "confirm_addition.json"


def _with_alpha(tmp_path, alpha) -> str:
    study = json.loads(DECLARATION.read_text())
    study["analysis"]["alpha"] = alpha
    path = tmp_path / DECLARATION.name
    path.write_text(json.dumps(study))
    return str(path)


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.05])
def test_an_alpha_outside_the_open_interval_is_refused(tmp_path, alpha):
    """Catches ``0 <=`` for ``0 <`` (or ``<= 1``): alpha 0 would declare a test that can never reject."""
    with pytest.raises(ValueError, match=r"analysis 'alpha' must be a number in \(0, 1\)"):
        load_declaration(_with_alpha(tmp_path, alpha))


@pytest.mark.parametrize("alpha", [1e-9, 0.999])
def test_an_alpha_just_inside_the_interval_is_accepted(tmp_path, alpha):
    assert load_declaration(_with_alpha(tmp_path, alpha))["analysis"]["alpha"] == alpha
