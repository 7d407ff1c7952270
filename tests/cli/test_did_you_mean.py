"""A mistyped option or config names what the user probably meant, in one line with exit status 2."""

from pathlib import Path

import pytest

from sapo_lab.cli import main
from sapo_lab.runs.config import closest_key, load_config

ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(argv, capsys) -> str:
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("error: "), (status, err)
    return err.strip()


@pytest.mark.parametrize("typed,meant", [
    (["--max_step", "2"], "--max_steps"),  # one letter short
    (["--max-step", "2"], "--max_steps"),  # the dash spelling the command line also accepts
    (["--optimization.max_step", "2"], "--optimization.max_steps"),  # a dotted key keeps its section
    (["--output_dir", "runs/x"], "--output-dir"),  # the command's own flag, not only config keys
])
def test_a_near_miss_names_the_key_meant(typed, meant, capsys):
    # catches no suggestion at all, a suggestion from the wrong pool (a config key for a flag), and a
    # dotted key answered with a bare leaf name the user did not type
    err = _one_line_error(["train", *typed], capsys)
    assert err.endswith(f"did you mean {meant}?"), err


def test_a_far_miss_suggests_nothing_and_points_at_the_help(capsys):
    # catches a cutoff so low that any key is offered for gibberish
    err = _one_line_error(["train", "--zzz", "1"], capsys)
    assert "did you mean" not in err and "train --help" in err


def test_a_folder_given_as_config_is_named_a_folder(capsys, monkeypatch):
    # catches the old report, "config file 'book/' does not exist", about a folder that plainly exists
    monkeypatch.chdir(ROOT)
    err = _one_line_error(["train", "--config", "book/"], capsys)
    assert "'book/' is a folder" in err and "does not exist" not in err


def test_a_run_folder_given_as_config_points_at_its_config_json(tmp_path, capsys):
    # catches a user sent away when the file they want sits inside the folder they typed
    (tmp_path / "config.json").write_text("{}")
    err = _one_line_error(["train", "--config", str(tmp_path)], capsys)
    assert f"{tmp_path}/config.json" in err


def test_a_misspelt_preset_names_the_preset(capsys):
    # catches an underscore/dash slip answered with the whole preset list and no pointer
    assert _one_line_error(["train", "--config", "cpu_tiny"], capsys).endswith("did you mean cpu-tiny?")


def test_the_library_suggests_in_the_form_typed():
    # the same suggestion reaches callers of load_config (a study's overrides), without the command line's dashes
    with pytest.raises(ValueError, match=r"unknown config key 'max_step'; did you mean 'max_steps'\?"):
        load_config("micro", {"max_step": "2"})
    assert closest_key("loss_typ") == "loss_type" and closest_key("qqqq") is None
