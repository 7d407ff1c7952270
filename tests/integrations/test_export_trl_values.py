"""``export-trl`` with non-default values and a model folder whose name Python's quoting would trip on: the exported
``train_trl.py`` is compiled and its top level run here (no TRL needed: ``main`` is not called), so what is checked
is what the script would train with."""

import json
import os

import pytest

from sapo_lab.cli import main

# A folder name holding Python's three quote forms, a backslash, a shell variable and a brace Python's str.format
# would read: each would end or change the literal it is written into if quoted carelessly.
AWKWARD = 'model \'a\' "b" """c""" \\x $HOME {seed}'


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl_awkward")
    model = root / AWKWARD
    model.mkdir()
    out = root / "job"
    assert main(["export-trl", "--config", "cpu-tiny", "--max_train_time_s", "0", "--seed", "7", "--max_steps", "37",
                 "--model", str(model), "--prompt-format", "chat", "--output-dir", str(out)]) == 0
    with open(out / "train_trl.py") as f:
        source = f.read()
    with open(out / "config.json") as f:
        config = json.load(f)
    return {"model": str(model), "source": source, "config": config}


def test_the_script_compiles_and_keeps_every_value(script):
    # catches: the model's name written into the docstring as its repr (its \"\"\" ends the docstring: a script that
    # does not compile), a value read back other than given (the model, the prompt format, the seed and the steps)
    namespace = {"__name__": "exported"}
    exec(compile(script["source"], "train_trl.py", "exec"), namespace)
    assert namespace["DEFAULT_MODEL"] == script["model"]
    assert namespace["PROMPT_FORMAT"] == "chat"
    assert namespace["CONFIG"] == script["config"]
    assert (namespace["CONFIG"]["seed"], namespace["CONFIG"]["optimization"]["max_steps"]) == (7, 37)
    assert namespace["CONFIG"]["model"]["name_or_path"] == script["model"]
    assert namespace["__doc__"].startswith("Train ") and "TRL's GRPOTrainer" in namespace["__doc__"].splitlines()[0]


def test_an_unknown_prompt_format_is_refused_in_one_line(tmp_path, capsys):
    # catches: a misspelt prompt format exported and left to fail inside TRL on the first batch
    code = main(["export-trl", "--config", "cpu-tiny", "--max_train_time_s", "0", "--prompt-format", "chatml",
                 "--output-dir", str(tmp_path / "job")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "prompt" in err and not os.path.exists(tmp_path / "job" / "train_trl.py")
