"""`python -m sapo_lab export-trl` refuses, in one line, values TRL's files cannot hold: a non-finite number (JSON has
no Infinity or NaN) and a seed numpy rejects; the exported README names the config and the model apart.
No TRL needed: the export writes text."""

import json

import pytest

from sapo_lab.cli import main


@pytest.mark.parametrize("flag, value, words", [
    ("--sapo_temperature_pos", "inf", "'loss.sapo_temperature_pos' = 'inf' is invalid: must be a finite number"),
    ("--sapo_temperature_neg", "nan", "'loss.sapo_temperature_neg' = 'nan' is invalid: must be a finite number"),
    ("--learning_rate", "inf", "'optimization.learning_rate' = 'inf' is invalid: must be a finite number"),
    ("--seed", "-5", "'seed' = '-5' is invalid: must be >= 0"),
    ("--seed", str(2**32), "must be < 4.29497e+09"),
])
@pytest.mark.parametrize("command", ["export-trl", "train"])
def test_values_the_files_cannot_hold_are_refused_in_one_line(command, flag, value, words, tmp_path, capsys):
    """Catches `Infinity` written into config.json and train_trl.py (invalid JSON), and a negative seed exported
    that numpy's seeding rejects at the first step; train reads the same config, so it refuses them too."""
    out_flag = ["--output-dir", str(tmp_path / "out")]
    code = main([command, f"{flag}={value}", *out_flag])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
    assert not (tmp_path / "out" / "config.json").exists()


def test_exported_files_are_strict_json_and_the_readme_names_config_and_model(tmp_path, capsys):
    """Catches 'Config: `cpu-tiny` with `cpu-tiny`' (the model read as a second config) and a config.json that only
    a lenient reader (allowing Infinity/NaN) accepts."""
    assert main(["export-trl", "--output-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    json.loads((tmp_path / "config.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in config.json"))
    readme = (tmp_path / "README.md").read_text()
    assert "with `cpu-tiny`" not in readme and "Config `cpu-tiny`, model `cpu-tiny`," in readme, readme[:300]
