"""The run script's array elements read back by bash itself: every character a shell interprets stays text."""
import shutil
import subprocess

import pytest

from sapo_lab.integrations.verl_export import _bash_element

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to read the elements back")


def _read_back(element: str, env: dict | None = None) -> str:
    """What bash stores for ``OVERRIDES=(element)``: the independent reading of the quoting."""
    script = f'OVERRIDES=({element})\nprintf "%s" "${{OVERRIDES[0]}}"'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                          env=env or {"PATH": "/usr/bin:/bin"}).stdout


@pytest.mark.parametrize("override", [
    "trainer.experiment_name='a`id`b'",  # a backtick would run a command
    'trainer.experiment_name=\'say "hi"\'',  # a double quote would end the element
    "trainer.experiment_name='cost $5 and $(id)'",  # a dollar would expand
    "trainer.experiment_name='back\\slash'",  # a backslash would escape what follows
])
def test_a_shell_character_in_a_value_reaches_verl_unchanged(override):
    """Catches an escape left out of the element's quoting (the backtick's, the quote's, the dollar's): bash
    would run, cut or expand the value instead of passing it to Hydra as written."""
    assert _read_back(_bash_element(override)) == override


def test_a_script_variable_that_begins_a_value_still_expands():
    """Catches the escape applied to the job's own $NGPUS too (then verl reads the text "$NGPUS")."""
    env = {"PATH": "/usr/bin:/bin", "NGPUS": "8"}
    assert _read_back(_bash_element("trainer.n_gpus_per_node=$NGPUS"), env) == "trainer.n_gpus_per_node=8"
