"""The exported TRL run gives one install route, in its script and its README alike, and it is one that works
from a checkout: TRL's pinned environment from requirements-trl.txt, then sapo_lab installed editable."""

import pathlib

from sapo_lab.integrations.trl_export import export
from sapo_lab.runs.config import load_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROUTE = ("pip install -r requirements-trl.txt", "pip install --no-deps -e .")


def test_script_and_readme_give_the_same_install_route(tmp_path):
    # Catches the two files drifting apart again (the script once advised an extra that no package index holds),
    # and a route that names a requirements file the checkout does not have.
    export(load_config("micro"), str(tmp_path / "trl"), source="micro")
    script = (tmp_path / "trl" / "train_trl.py").read_text()
    readme = (tmp_path / "trl" / "README.md").read_text()
    for text in (script, readme):
        assert all(step in text for step in ROUTE), text[:600]
        assert "[trl]" not in text
    assert (ROOT / "requirements-trl.txt").is_file()
    assert any(line.startswith("trl==") for line in (ROOT / "requirements-trl.txt").read_text().splitlines())
