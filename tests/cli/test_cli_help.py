"""The command line's help: fast, and listing every config key with its default and comment.

The list is generated from the config tree's fields (sapo_lab.runs.config_keys); these tests
hold it against the imported config tree, so a key added to the tree without reaching the
help, a default shown that is not the default, or a heavy import before parsing fails here.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from sapo_lab.cli import COMMANDS, build_parser, main
from sapo_lab.runs.config import TrainConfig, leaf_keys, load_config, resolve_key
from sapo_lab.runs.config_keys import config_keys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_COMMANDS = ["train", "eval", "sample", "compare", "export-trl", "export-verl"]
ENTRY = re.compile(r"^  --(?P<key>[\w.]+)(?:, --(?P<alias>\w+))?  \(default (?P<default>.*?)(?:; cpu-tiny: (?P<preset>.*))?\)$")


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def _entries(text: str) -> dict:
    """key -> (alias, shown default, cpu-tiny value or None, comment) from a command's help."""
    lines, out = text.splitlines(), {}
    for i, line in enumerate(lines):
        m = ENTRY.match(line)
        if m:
            comment = []
            for nxt in lines[i + 1:]:
                if not nxt.startswith(" " * 6):
                    break
                comment.append(nxt.strip())
            out[m["key"]] = (m["alias"], m["default"], m["preset"], " ".join(comment))
    return out


def _value(config, dotted: str):
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


@pytest.mark.parametrize("command", CONFIG_COMMANDS)
def test_every_config_key_is_listed_with_its_default(command, capsys, tmp_path):
    # catches a hand-written list (a key of the tree missing, or a key the tree no longer has),
    # a default shown that is not the default, and an alias that does not resolve to its key
    entries = _entries(_help(command, capsys))
    assert sorted(entries) == sorted(leaf_keys())
    empty = tmp_path / "empty.json"
    empty.write_text("{}")  # the dataclass defaults, no preset
    defaults = TrainConfig()
    for key, (alias, shown, _, comment) in entries.items():
        # typed back on the command line, the shown default gives the default
        assert _value(load_config(str(empty), {key: json.loads(shown) if shown == '""' else shown}), key) == _value(
            defaults, key
        ), key
        assert alias is None or resolve_key(alias) == key
        assert len(comment.split()) >= 2, f"{key} has no comment in the help"


def test_the_default_presets_values_are_shown_where_they_differ(capsys):
    # catches a help that shows only dataclass defaults while --config defaults to cpu-tiny
    entries = _entries(_help("train", capsys))
    tiny, bare = load_config("cpu-tiny"), TrainConfig()
    differs = {k for k in leaf_keys() if _value(tiny, k) != _value(bare, k)}
    assert differs and {k for k, e in entries.items() if e[2] is not None} == differs
    for key in differs:
        assert _value(load_config("cpu-tiny", {key: entries[key][2]}), key) == _value(tiny, key)


def test_a_field_added_to_the_tree_reaches_the_help():
    # catches a reader that lists known keys instead of reading the declared tree, and a key without a description
    from dataclasses import field

    from pydantic import Field
    from pydantic.dataclasses import dataclass

    from sapo_lab.runs.config import LossConfig

    @dataclass
    class Loss(LossConfig):
        new_knob: int = Field(7, description="a planted knob, in units of knobs")

    @dataclass
    class Tree(TrainConfig):
        loss: Loss = field(default_factory=Loss)

    keys = {k.key: k for k in config_keys(Tree)}
    assert keys["loss.new_knob"].default == 7 and keys["loss.new_knob"].alias == "new_knob"
    assert keys["loss.new_knob"].comment == "a planted knob, in units of knobs"

    @dataclass
    class Silent(LossConfig):
        new_knob: int = 7

    @dataclass
    class Bad(TrainConfig):
        loss: Silent = field(default_factory=Silent)

    with pytest.raises(ValueError, match="loss.new_knob"):
        config_keys(Bad)


def test_help_loads_neither_torch_nor_transformers():
    # catches a top-level import of the config module, the loss library or the trainer on the
    # way to argparse (the package __init__, cli.py, or a command's flags)
    code = (
        "import runpy, sys\n"
        "sys.argv = ['sapo_lab', 'train', '--help']\n"
        "try:\n"
        "    runpy.run_module('sapo_lab', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    assert "--loss.loss_type, --loss_type" in proc.stdout and "--steps_per_generation" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []"


def test_unknown_key_is_one_line_error_naming_it():
    # catches a mistyped override accepted silently, or reported with a traceback
    proc = subprocess.run([sys.executable, "-m", "sapo_lab", "train", "--loss_typo", "grpo"], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: unknown config key --loss_typo; did you mean --loss_type?"]


def test_every_command_is_in_the_one_tree(capsys):
    # catches a subcommand parsed outside the tree (its own parser, its own error handling)
    subparsers = build_parser()._subparsers._group_actions[0].choices
    assert list(subparsers) == [c.name for c in COMMANDS]
    assert {"study", "replicate", "conformance", "grade", "doctor", *CONFIG_COMMANDS} == set(subparsers)
    assert "--results-root" in _help("study", capsys) and "--tau-pos" in _help("conformance", capsys)


@pytest.mark.parametrize(
    "argv,match",
    [
        (["study", "x.json", "--bogus"], "unrecognized arguments: --bogus"),
        (["study", "x.json", "--shard", "3/2"], "--shard must be I/N"),
        (["study"], "required: study"),
        (["conformance"], "required: target"),
        (["conformance", "m:f", "--learning_rate", "1"], "unrecognized arguments"),
        (["doctor"], "required: RUN"),
        (["doctor", "run", "--learning_rate", "1"], "unrecognized arguments"),
        (["replicate", "confirm_addition"], "required: question"),
        (["replicate", "confirm_addition", "Q1", "--learning_rate", "1"], "unrecognized arguments"),
    ],
)
def test_study_and_conformance_errors_are_one_line(argv, match, capsys):
    # catches the study and conformance commands keeping their own error paths (usage dumps, status 1)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and match in err and "\n" not in err, err


def test_keys_with_fixed_values_list_them_in_the_help():
    # The values are typed here from the validators' own lists (not read from the help): catches a description
    # that names a constant ("one of LR_SCHEDULES") instead of the values a user can type, and one that has
    # drifted from the list the config checks against.
    from sapo_lab.objective.choices import AGGREGATIONS, MAX_LOG_RATIO_POLICIES
    from sapo_lab.runs.config import LR_SCHEDULES

    described = {entry.key: entry.comment for entry in config_keys(TrainConfig)}
    for key, values in (("optimization.lr_scheduler_type", LR_SCHEDULES), ("loss.aggregation", AGGREGATIONS),
                        ("loss.max_log_ratio_policy", MAX_LOG_RATIO_POLICIES)):
        assert all(value in re.findall(r"\w+", described[key]) for value in values), (key, described[key])
    assert not any(re.search(r"\bone of [A-Z_]{3,}", text) for text in described.values())


def test_the_conformance_summary_names_both_target_forms(capsys):
    # catches the summary offering only MODULE:FUNCTION, which imports from the working directory alone, so a
    # reader outside the loss's folder does not learn that a file path works from anywhere
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "path/to/file.py:FUNCTION or MODULE:FUNCTION" in text
