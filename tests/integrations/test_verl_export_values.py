"""``export-verl`` with a non-default, distinct value for every setting the job reads, and with values a shell
or Hydra would interpret: the exported ``run_verl.sh`` is run by bash as a user runs it, against a stand-in
``verl.trainer.main_ppo`` that records its arguments, so what is checked is what verl would receive.

Distinct values: NGPUS = 4 and NNODES = 2 (a swap shows), 24 prompts a rollout, G = 16, M = 3 (so a mini-batch
is 8 prompts and 128 responses), seed 7, 37 rollout steps over 240 training prompts (10 rollouts an epoch, so 4
epochs). The model folder's name and the config file's name
carry ``$``, spaces, ``=``, Hydra's ``,[]{}():`` and the shell's ``"`$(...)*?;&|#~!``; ``'`` and ``\\`` are
refused in one line (Hydra's quoted strings cannot hold them as this export writes them).
"""

import json
import os
import subprocess
import sys

import pytest
from _verl_job import as_dict

from sapo_lab.cli import main
from sapo_lab.runs.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Every character a shell or Hydra's override grammar gives a meaning to, except the two the export refuses.
AWKWARD = 'a $HOME $HERE $NGPUS ${NNODES} $(echo x) `id` "q" =v, [l]{d}(p):c *?;&|#~! %s'
# The settings above; the small splits keep the export under a second.
SETTINGS = {"rollout.prompts_per_rollout": 24, "optimization.steps_per_generation": 3, "seed": 7,
            "optimization.max_steps": 37, "task.num_train": 240, "task.num_dev": 16}
STAND_IN = """import json, os, sys
with open(os.environ["VERL_ARGV"], "w") as f:
    json.dump(sys.argv[1:], f)
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("awkward")
    model = root / f"model {AWKWARD}"
    model.mkdir()
    config = root / f"cfg {AWKWARD}.json"
    config.write_text(json.dumps(load_config("gpu-gpt2-small", SETTINGS).to_dict()))
    out = root / "job"
    assert main(["export-verl", "--config", str(config), "--model", str(model), "--output-dir", str(out)]) == 0
    return {"root": root, "model": str(model), "config": str(config), "out": str(out)}


def _run(job, *extra, **env):
    """Run the exported script with bash; return (the process, the arguments the stand-in main_ppo received)."""
    stand_in = os.path.join(job["root"], "stand_in")
    os.makedirs(os.path.join(stand_in, "verl", "trainer"), exist_ok=True)
    for package in ("verl", os.path.join("verl", "trainer")):
        open(os.path.join(stand_in, package, "__init__.py"), "w").close()
    with open(os.path.join(stand_in, "verl", "trainer", "main_ppo.py"), "w") as f:
        f.write(STAND_IN)
    argv_file = os.path.join(job["root"], "argv.json")
    if os.path.exists(argv_file):
        os.remove(argv_file)
    full = dict(os.environ, PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
                PYTHONPATH=os.pathsep.join([stand_in, ROOT]), VERL_ARGV=argv_file, **env)
    proc = subprocess.run(["bash", os.path.join(job["out"], "run_verl.sh"), *extra], env=full, capture_output=True,
                          text=True, timeout=120)
    argv = json.load(open(argv_file)) if os.path.exists(argv_file) else None
    return proc, argv


def test_the_script_parses(job):
    # catches: an override that breaks the script's syntax (an unbalanced quote, a stray backtick)
    proc = subprocess.run(["bash", "-n", os.path.join(job["out"], "run_verl.sh")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_gpus_and_nodes_reach_verl_each_in_its_own_setting(job):
    # NGPUS=4, NNODES=2: catches the two swapped (n_gpus_per_node=2, nnodes=4), and either left at its default 1
    proc, argv = _run(job, NGPUS="4", NNODES="2")
    assert proc.returncode == 0, proc.stderr
    got = as_dict(argv)
    assert (got["trainer.n_gpus_per_node"], got["trainer.nnodes"]) == ("4", "2")


def test_values_with_shell_and_hydra_characters_reach_verl_verbatim(job):
    # the model folder and the experiment name (the config file's name) as verl receives them, after bash.
    # Catches: a `$` left unescaped (bash would expand $HOME, or stop on an unset variable under `set -u`), a
    # script variable's name inside a value expanded as the script's own ($HERE, $NGPUS), a backtick or $(...)
    # run, a value left unquoted for Hydra (its `,` would make a sweep, its `[` a list), and a `${` left bare inside
    # Hydra's quotes (OmegaConf would read ${NNODES} as an interpolation and stop: `\${` is its escape for the text,
    # checked with hydra-core 1.3 and OmegaConf 2.3)
    proc, argv = _run(job, NGPUS="4", NNODES="2")
    assert proc.returncode == 0, proc.stderr
    got = dict(item.split("=", 1) for item in argv)

    def hydra_quoted(text):
        return "'" + text.replace("${", "\\${") + "'"

    assert "${NNODES}" in AWKWARD and "\\${NNODES}" in hydra_quoted(AWKWARD)
    assert got["actor_rollout_ref.model.path"] == hydra_quoted(job["model"])
    assert got["trainer.experiment_name"] == hydra_quoted(f"cfg {AWKWARD}-sapo-seed7")
    assert (got["data.seed"], got["trainer.total_training_steps"], got["trainer.total_epochs"]) == ("7", "37", "4")


def test_an_extra_override_is_passed_on_as_typed(job):
    # catches: "$@" left unquoted (the words split), or extra overrides dropped
    extra = "+trainer.note='a $b, [c]=d'"
    proc, argv = _run(job, extra, NGPUS="4", NNODES="2")
    assert proc.returncode == 0, proc.stderr
    assert argv[-1] == extra


def test_mini_batch_and_staleness_reach_verl_and_the_readme_as_distinct_numbers(job):
    # 24 prompts / M = 3 -> 8 prompts a mini-batch, x G = 16 -> 128 responses: every number different, so a
    # swapped pair (prompts for the mini-batch, M for the mini-batch) shows
    proc, argv = _run(job, NGPUS="4", NNODES="2")
    got = as_dict(argv)
    assert (got["data.train_batch_size"], got["actor_rollout_ref.actor.ppo_mini_batch_size"],
            got["actor_rollout_ref.rollout.n"]) == ("24", "8", "16")
    readme = " ".join(open(os.path.join(job["out"], "README.md")).read().split())
    assert "= 24 / 8 x 1 = 3 optimizer steps per rollout" in readme
    assert "The GPU count must divide 128 (responses per mini-batch)" in readme
    assert "checkpoints/global_step_37/actor" in readme


def test_a_gpu_count_that_does_not_divide_the_mini_batch_stops_the_script(job):
    # 3 x 2 = 6 GPUs do not divide 128 responses; 4 x 2 = 8 do (above). Catches: the guard reading one variable only
    proc, argv = _run(job, NGPUS="3", NNODES="2")
    assert proc.returncode == 2 and argv is None
    assert "NGPUS x NNODES = 6 GPUs must divide the 128 responses" in proc.stderr


@pytest.mark.parametrize("char", ["'", "\\"])
def test_a_value_hydra_cannot_hold_quoted_is_refused_in_one_line(tmp_path, capsys, char):
    # catches: a quote or backslash written into the script (Hydra would end the string there or read an escape)
    model = tmp_path / f"model{char}x"
    model.mkdir()
    config = tmp_path / "small.json"
    config.write_text(json.dumps(load_config("gpu-gpt2-small", SETTINGS).to_dict()))
    code = main(["export-verl", "--config", str(config), "--model", str(model), "--output-dir", str(tmp_path / "job")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "for Hydra" in err
