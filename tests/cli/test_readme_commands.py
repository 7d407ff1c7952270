"""Every ``python -m sapo_lab`` command the README and the "Using sapo_lab" page show runs as a reader would type
it, and every preset trains.

The commands are read from each document's code blocks and inline code (optional ``[...]`` parts dropped, a
line continued with a backslash joined; a span naming a placeholder such as ``RUN`` or ``MODULE:FUNCTION`` is a
mention, not a command). Each document's commands run in an empty folder of their own through the command
line, in the document's order (``eval`` reads the model ``train`` wrote), with
the ``micro`` preset's sizes appended as overrides where a command takes a config: the same code path in
seconds. Catches a documented command the CLI refuses, such as the ``task.options`` keys that made
``--config gpu-gpt2-small`` exit 2, and a README example that drifted from the flags.
"""

import json
import re
import shlex
from pathlib import Path

import pytest
from _small_gpu_model import shrink_gpu_gpt2_small

from sapo_lab.cli import main
from sapo_lab.runs.config import PRESETS
from sapo_lab.runs.config_paths import flatten_config

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", ROOT / "book" / "using_sapo_lab.md")
PREFIX = "python -m sapo_lab "
CONFIG_COMMANDS = {"train", "eval", "sample", "compare", "export-trl", "export-verl"}
# The micro preset's sizes, typed as overrides onto whatever --config the README names.
SMALL = {k: v for k, v in flatten_config(PRESETS["micro"]).items() if k not in ("threads", "max_train_time_s")}
# Commands whose full run is a study of many minutes: the test keeps their path up to the work (the plan).
PLAN_ONLY = {"replicate": "--dry-run"}
PLAIN_LOSS = '''
import torch


def my_loss(logp, old_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):
    """SAPO as the paper writes it: -(4/tau) sigmoid(tau (r - 1)) A per token, mean per response, mean over responses."""
    ratio = torch.exp(logp - old_logp)
    tau = torch.where(advantages > 0, torch.full_like(advantages, tau_pos), torch.full_like(advantages, tau_neg))
    per_token = -(4.0 / tau[:, None]) * torch.sigmoid(tau[:, None] * (ratio - 1.0)) * advantages[:, None]
    per_response = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_response.mean()
'''


def _is_mention(tokens: list[str]) -> bool:
    """``python -m sapo_lab doctor RUN``: a placeholder in capitals names an argument, it is not one."""
    return len(tokens) < 5 or any(re.fullmatch(r"[A-Z_:]+", t) for t in tokens[3:])


def readme_commands(text: str) -> list[str]:
    """The README's ``python -m sapo_lab`` commands, in order, comments and optional ``[...]`` parts removed."""
    found = []
    text = re.sub(r"\s*\\\n\s*", " ", text)  # a command continued on the next line is one command
    for m in re.finditer(r"```[a-z]*\n(.*?)```|`(python -m sapo_lab [^`]+)`", text, re.S):
        lines = m[1].splitlines() if m[1] is not None else [m[2]]
        for line in lines:
            line = re.sub(r"\s*\[[^\]]*\]", "", line.split(" #", 1)[0]).strip()
            if line.startswith(PREFIX) and not _is_mention(shlex.split(line)):
                found.append(line)
    return found


def runnable(command: str) -> list[str]:
    """The argv of one README command, sized down: micro's sizes for a config command (not on --resume, which
    refuses changed keys), the plan only for a command that would run a whole study."""
    argv = shlex.split(command)[3:]
    name = argv[0]
    if name in CONFIG_COMMANDS and "--resume" not in argv:
        for key, value in SMALL.items():
            if f"--{key}" not in argv:
                argv += [f"--{key}", ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    if name in PLAN_ONLY:
        argv.append(PLAN_ONLY[name])
    return argv


def test_the_extraction_finds_the_documented_commands():
    # Catches an extraction that silently finds nothing (and so tests nothing), or keeps mentions and options.
    commands = readme_commands((ROOT / "README.md").read_text())
    names = [shlex.split(c)[3] for c in commands]
    assert {"train", "eval", "sample", "compare", "study", "conformance", "export-trl", "export-verl",
            "replicate"} <= set(names), names
    assert "--max_steps" in " ".join(commands)  # the quick start shows how to shorten a run
    assert not any("[" in c or "#" in c or " RUN" in c for c in commands)
    sample = "```bash\npython -m sapo_lab train --config x --loss_type sapo   # or grpo\n```\n" \
             "`python -m sapo_lab doctor RUN` and `python -m sapo_lab export-trl --config c --output-dir d [--model m]`"
    assert readme_commands(sample) == ["python -m sapo_lab train --config x --loss_type sapo",
                                       "python -m sapo_lab export-trl --config c --output-dir d"]
    continued = "```bash\npython -m sapo_lab train --config x \\\n    --max_steps 2\n```\n"
    assert readme_commands(continued) == ["python -m sapo_lab train --config x --max_steps 2"]


@pytest.mark.slow
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_documented_command_runs(document, tmp_path, monkeypatch, capsys):
    for name in ("experiments", "results", "assignment"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "my_module.py").write_text(PLAIN_LOSS)
    (tmp_path / "path" / "to").mkdir(parents=True)  # the README audits a loss given by its file's path
    (tmp_path / "path" / "to" / "my_loss.py").write_text(PLAIN_LOSS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    failures = []
    commands = readme_commands(document.read_text())
    assert commands, f"{document.name} shows no command"
    for command in commands:
        status = main(runnable(command))
        captured = capsys.readouterr()
        if status != 0:
            failures.append(f"{command} -> exit {status}: {captured.err.strip().splitlines()[-1:]}")
    assert not failures, "\n".join(failures)


# Each preset, two rollout steps through the command line, with its data, cold start and batch sizes cut down.
# Each runs at its own model name; gpu-gpt2-small's is built with a one-layer trunk (_small_gpu_model), which
# keeps what the preset sets (its name, GPT-2's vocabulary and positions, its task options, learning rates and
# schedule) and what resume compares, and spares the CPU the 124M-parameter GPT-2 that only a GPU run needs.
TWO_STEPS = ["--max_steps", "2", "--cold_start.max_updates", "2", "--cold_start.batch_size", "4",
             "--cold_start.eval_every", "1", "--prompts_per_rollout", "2", "--num_generations", "2",
             "--num_train", "64", "--num_dev", "8", "--num_eval", "8", "--dev_prompts", "4", "--num_samples", "2",
             "--pass_k", "1,2", "--dev_every", "1", "--save_steps", "1", "--max_train_time_s", "0"]


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_trains_through_the_command_line(tmp_path, preset, capsys, monkeypatch):
    shrink_gpu_gpt2_small(monkeypatch)
    monkeypatch.chdir(tmp_path)  # the presets' cold-start cache (runs/_coldstart) is relative: not the checkout's
    out = tmp_path / "run"
    assert main(["train", "--config", preset, "--output-dir", str(out), *TWO_STEPS]) == 0, capsys.readouterr().err
    saved = json.loads((out / "config.json").read_text())
    assert saved["model"]["name_or_path"] == PRESETS[preset].get("model", {}).get("name_or_path", "cpu-tiny")
    options = PRESETS[preset].get("task", {}).get("options", {})
    assert saved["task"]["options"] == options  # the preset's task options reached the run
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    # Resume with the same command line and one more step: the preset's keys, task options included, are compared
    # with the saved run and found equal (catches the resume policy spelling task options otherwise than loading).
    longer = [*TWO_STEPS[:1], "3", *TWO_STEPS[2:]]
    assert main(["train", "--config", preset, "--output-dir", str(out), "--resume", *longer]) == 0, \
        capsys.readouterr().err
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


def test_task_options_from_a_file_and_the_command_line_reach_the_task(tmp_path, capsys, monkeypatch):
    """``--task.options.NAME VALUE`` and a JSON config's ``task.options`` both load, resume compares them by
    name, and a changed option is refused naming it. Catches the two flattenings disagreeing again."""
    monkeypatch.chdir(tmp_path)  # the default cold-start cache is relative (runs/_coldstart): not the checkout's
    config = tmp_path / "three_digits.json"
    config.write_text(json.dumps({"model": {"name_or_path": "cpu-micro"}, "task": {"options": {"max_digits": 3}}}))
    out = tmp_path / "run"
    small = TWO_STEPS[:-4] + ["--max_train_time_s", "0"]
    assert main(["train", "--config", str(config), "--output-dir", str(out), *small]) == 0, capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["task"]["options"] == {"max_digits": 3}
    assert main(["train", "--config", str(config), "--output-dir", str(out), "--resume", "--max_steps", "3"]) == 0
    capsys.readouterr()
    status = main(["train", "--config", str(config), "--output-dir", str(out), "--resume", "--max_steps", "4",
                   "--task.options.max_digits", "4"])
    err = capsys.readouterr().err
    assert status == 2 and "task.options.max_digits (saved 3, requested 4)" in err and err.count("\n") == 1, err
    # All options at once as a JSON object are compared option by option too (catches the object form silently
    # ignored on resume, as the outside test found), and a new option is a change.
    for changed in ('{"max_digits": 2}', '{"max_digits": 3, "min_digits": 3}'):
        status = main(["train", "--config", str(config), "--output-dir", str(out), "--resume", "--max_steps", "4",
                       "--task.options", changed])
        err = capsys.readouterr().err
        assert status == 2 and "--resume cannot change task.options." in err and err.count("\n") == 1, err
    # The object form and a dotted option merge, in either order (catches the object replaced by the option).
    from sapo_lab.runs.config import load_config

    for overrides in ({"task.options": '{"max_digits": 3, "min_digits": 1}', "task.options.min_digits": "2"},
                      {"task.options.min_digits": "2", "task.options": '{"max_digits": 3}'}):
        assert dict(load_config("micro", overrides).task.options) == {"max_digits": 3, "min_digits": 2}
    with pytest.raises(ValueError, match="'task.options' must be a mapping"):
        load_config("micro", {"task.options": "[1]"})
    # A misspelt option is the task's one-line refusal, naming it.
    status = main(["train", "--config", "micro", "--output-dir", str(tmp_path / "other"), "--task.options.max_digit", "3"])
    err = capsys.readouterr().err
    assert status == 2 and "max_digit" in err and err.count("\n") == 1, err


def test_the_help_names_every_preset(capsys):
    # catches a preset that trains but that --help does not offer (micro was missing from the list)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(name in out.split("preset name (", 1)[1].split(")", 1)[0] for name in PRESETS)
