"""``python -m sapo_lab export-verl``: a directory that trains the same config with verl's ``main_ppo``.

:func:`export` writes ``run_verl.sh`` (the ``python3 -m verl.trainer.main_ppo`` command, one Hydra override
per line, each commented with the sapo_lab key it comes from), ``data/train.jsonl`` and ``data/dev.jsonl``
(verl's row layout: ``prompt``, ``data_source``, ``reward_model.ground_truth``, ``extra_info``; verl 0.9.1's
``RLHFDataset`` reads ``.jsonl`` as it reads ``.parquet``, so the main environment needs no pyarrow),
``reward.py`` (verl's ``compute_score``: the task's own verifier), ``config.json`` and ``README.md`` with the
lines for one GPU, one node and several nodes. The mapping is :mod:`sapo_lab.integrations.verl`.
"""

from __future__ import annotations

import json
import os
import re
import sys

from ..runs.durable import atomic_write
from . import verl as mapping

RUN_SCRIPT = "run_verl.sh"
DATA_FILES = {"train": "data/train.jsonl", "dev": "data/dev.jsonl"}

REWARD_MODULE = '''"""verl reward function of this export: sapo_lab's own task verifier.

verl loads it from reward.custom_reward_function.path and calls
compute_score(data_source, solution_str, ground_truth, extra_info) once per response.
"""

from sapo_lab.integrations.verl import compute_score  # noqa: F401
'''

SCRIPT_VARIABLES = ("HERE", "NGPUS", "NNODES")
_PLAIN = re.compile(r"[A-Za-z0-9_.:/+-]+")


def hydra_value(value) -> str:
    """``value`` as Hydra's override grammar reads it back (bool, null, number, list, or a quoted string)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text not in ("true", "false", "null"):
        return text
    if "'" in text or "\\" in text:
        raise ValueError(f"cannot quote {text!r} for Hydra")
    # inside quotes OmegaConf still reads ${...} as an interpolation; \${ is its escape for the text itself
    return "'" + text.replace("${", "\\${") + "'"


def _bash_element(override: str) -> str:
    """One element of a bash array, double-quoted: nothing in it expands but a script variable that begins the
    value, inside Hydra's quote or not (``key='$HERE/...'``, ``key=$NGPUS``). Only the job's own settings begin
    so (a user's folder is absolute, a hub name holds no ``$``): a ``$HERE`` inside a user's name stays text."""
    escaped = override.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    key, sep, value = escaped.partition("=")
    quote = "'" if value.startswith("'") else ""
    rest = value[len(quote):]
    if any(rest.startswith("\\$" + name) for name in SCRIPT_VARIABLES):
        value = quote + rest[1:]
    return '"' + key + sep + value + '"'


def job_overrides(cfg, splits, *, name: str) -> list[tuple[str, str]]:
    """(override, comment) pairs of the exported command, in order: mapped keys, fixed settings, the job's files."""
    where = mapping.sources(cfg)
    values = mapping.overrides(cfg)
    longest = max(len(p.prompt) for split in DATA_FILES for p in splits[split])
    policy = values["actor_rollout_ref.model.path"]
    if mapping.is_size_name(cfg.model.name_or_path):
        values["actor_rollout_ref.model.path"] = f"$HERE/{policy}"
    job = {
        "data.train_files": (f"$HERE/{DATA_FILES['train']}", "task: the train split"),
        "data.val_files": (f"$HERE/{DATA_FILES['dev']}", "task: the dev split"),
        "data.max_prompt_length": (longest + mapping.PROMPT_TOKEN_MARGIN,
                                   f"task: the longest prompt ({longest} characters) plus "
                                   f"{mapping.PROMPT_TOKEN_MARGIN} tokens a tokenizer may add"),
        "reward.custom_reward_function.path": ("$HERE/reward.py", "task: the task's own verifier"),
        "trainer.n_gpus_per_node": ("$NGPUS", "job: GPUs per node (NGPUS, default 1)"),
        "trainer.nnodes": ("$NNODES", "job: nodes (NNODES, default 1)"),
        "trainer.project_name": ("sapo_lab", "job"),
        "trainer.experiment_name": (name, "job"),
        "trainer.default_local_dir": ("$HERE/checkpoints", "job: verl's checkpoints"),
    }
    out = [(f"{key}={hydra_value(value)}", ", ".join(where[key])) for key, value in values.items()
           if key not in mapping.FIXED]
    out += [(f"{key}={hydra_value(values[key])}", "fixed: " + why) for key, (_value, why) in mapping.FIXED.items()]
    for key, (value, comment) in job.items():
        text = value if value in ("$NGPUS", "$NNODES") else hydra_value(value)
        out.append((f"{key}={text}", comment))
    return out


def _script(cfg, pairs, *, source: str) -> str:
    width = min(72, max(len(_bash_element(o)) for o, _ in pairs))
    lines = "\n".join(f"    {_bash_element(o):<{width}}  # {c}" for o, c in pairs)
    m = mapping.mini_batch_prompts(cfg) * cfg.rollout.num_generations
    cold = ""
    if mapping.is_size_name(cfg.model.name_or_path):
        cold = f'''
# The policy: sapo_lab's own cold start of {cfg.model.name_or_path!r} (a character-level GPT-2), once.
if [ ! -f "$HERE/{mapping.policy_path(cfg)}/config.json" ]; then
    python3 -m sapo_lab train --config "$HERE/config.json" --optimization.max_steps 0 \\
        --output-dir "$HERE/{mapping.COLD_START_DIR}"
fi
'''
    return f'''#!/usr/bin/env bash
# Train with verl {mapping.TESTED_VERL_VERSION}'s GRPO trainer on the sapo_lab config {source!r} (config.json),
# written by `python -m sapo_lab export-verl` from sapo_lab/integrations/verl.py.
# Usage: [NGPUS=8] [NNODES=2] bash {RUN_SCRIPT} [extra Hydra overrides]   (README.md)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NGPUS=${{NGPUS:-1}}
NNODES=${{NNODES:-1}}
# Every GPU trains an equal share of each mini-batch ({m} responses).
if [ $(( {m} % (NGPUS * NNODES) )) -ne 0 ]; then
    echo "error: NGPUS x NNODES = $(( NGPUS * NNODES )) GPUs must divide the {m} responses of a mini-batch" >&2
    exit 2
fi
# Extra overrides that would not act where they seem to (the temperatures in policy_loss, rollout correction).
python3 -m sapo_lab.integrations.verl_export check-overrides "$@"
{cold}
OVERRIDES=(
{lines}
)
exec python3 -m verl.trainer.main_ppo "${{OVERRIDES[@]}}" "$@"
'''


README = """# verl run exported from sapo_lab

Config `{source}` with `{model}`; verl {verl_version}. `{script}` holds the whole command: one Hydra override
per line, each commented with the sapo_lab key it comes from (or why it is fixed). The mapping is declared in
`sapo_lab/integrations/verl.py` (keys verl lacks are listed there as dropped, values it cannot reproduce refused).

One rollout is {p} prompts x G = {g} responses (`data.train_batch_size={p}`, `actor_rollout_ref.rollout.n={g}`),
split into mini-batches of {mb} prompts (`actor_rollout_ref.actor.ppo_mini_batch_size={mb}`) for
`ppo_epochs=1`: the staleness M = train_batch_size / ppo_mini_batch_size x ppo_epochs = {p} / {mb} x 1 = {k}
optimizer steps per rollout, as in the book. The GPU count must divide {per_step} (responses per mini-batch).

The SAPO temperatures are `actor_rollout_ref.actor.tau_pos` / `tau_neg`, the fields verl's SAPO loss reads.
verl's own SAPO example scripts pass `+actor_rollout_ref.actor.policy_loss.tau_pos=...`, which verl {verl_version}
composes and then refuses at startup (`PolicyLossConfig` has no such field); `{script}` refuses it too.

```bash
pip install "verl=={verl_version}" vllm && {sapo_pip}
# one GPU
bash {script}
# one node, N GPUs (N must divide {per_step})
NGPUS=N bash {script}
# several nodes: start Ray on each (`ray start --head` here, `ray start --address=HEAD:6379` on the others),
# with this directory on a filesystem every node sees, then on the head node
NNODES=2 NGPUS=8 bash {script}
# any other verl setting: an extra Hydra override at the end
bash {script} trainer.logger='[console,wandb]'
```
{cold_note}
Data: `data/train.jsonl` ({n_train} rows) and `data/dev.jsonl` ({n_dev} rows), verl's row layout; verl
{verl_version} reads JSON lines as it reads parquet. `reward.py` scores a response with the task's own verifier
(1 for the reference answer, 0 otherwise); verl gives it no EOS flag, so a truncated response is scored as if
finished (sapo_lab/integrations/verl.py, DIFFERENCES).

Held-out Pass@1, with sapo_lab's evaluator, after merging verl's checkpoint into a Hugging Face directory:
```bash
python -m verl.model_merger merge --backend fsdp --local_dir checkpoints/global_step_{steps}/actor --target_dir merged
python -m sapo_lab eval --config config.json --model merged
```
"""


def export(cfg, output_dir: str, *, source: str, model: str | None = None) -> list[str]:
    """Write run_verl.sh, reward.py, data/, config.json and README.md into ``output_dir``; return the paths.

    ``model`` overrides ``cfg.model.name_or_path``. Refuses (ValueError) a config verl cannot reproduce and
    a directory that already holds an export.
    """
    from ..tasks import splits_for, task_for
    from .output_folder import prepare_output_folder

    if model:
        # a local directory is made absolute: the job runs from anywhere
        cfg.model.name_or_path = os.path.abspath(model) if os.path.isdir(model) else model
    mapping.check_supported(cfg)
    prepare_output_folder(output_dir, (RUN_SCRIPT, "reward.py", "config.json", "README.md", "data"))
    task = task_for(cfg)
    splits = splits_for(cfg, task)
    name = f"{os.path.splitext(os.path.basename(source))[0]}-{cfg.loss.loss_type}-seed{cfg.seed}"
    pairs = job_overrides(cfg, splits, name=name)
    os.makedirs(os.path.join(output_dir, "data"), exist_ok=True)
    files = {}
    for split, rel in DATA_FILES.items():
        rows = [mapping.problem_row(p, cfg.task.name, cfg.task.options, split, i) for i, p in enumerate(splits[split])]
        files[rel] = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    data = cfg.to_dict()
    k = cfg.optimization.steps_per_generation
    mb = mapping.mini_batch_prompts(cfg)
    size_name = mapping.is_size_name(cfg.model.name_or_path)
    files.update({
        RUN_SCRIPT: _script(cfg, pairs, source=source),
        "reward.py": REWARD_MODULE,
        "config.json": json.dumps(data, indent=2, sort_keys=True) + "\n",
        "README.md": README.format(
            source=source, model=cfg.model.name_or_path, verl_version=mapping.TESTED_VERL_VERSION, script=RUN_SCRIPT,
            p=cfg.rollout.prompts_per_rollout, g=cfg.rollout.num_generations, mb=mb, k=k,
            per_step=mb * cfg.rollout.num_generations, n_train=len(splits["train"]), n_dev=len(splits["dev"]),
            steps=cfg.optimization.max_steps,
            sapo_pip=("pip install -e PATH_TO_SAPO_LAB   # sapo_lab and its requirements: reward.py, the cold start"
                      if size_name else
                      "pip install --no-deps -e PATH_TO_SAPO_LAB   # reward.py's verifier needs only the standard library"),
            cold_note=(f"\nThe model is sapo_lab's size name `{cfg.model.name_or_path}`: the first run trains "
                       f"sapo_lab's cold start (`sapo_lab train` with max_steps 0) into `{mapping.COLD_START_DIR}/` "
                       f"and verl starts from `{mapping.policy_path(cfg)}` (its character tokenizer included).\n"
                       if size_name else ""),
        ),
    })
    paths = []
    for rel, text in files.items():
        path = os.path.join(output_dir, rel)
        atomic_write(path, text)
        paths.append(path)
    os.chmod(os.path.join(output_dir, RUN_SCRIPT), 0o755)
    return paths


# ---------------------------------------------------------------- CLI


def export_verl_command(args, overrides) -> int:
    """``python -m sapo_lab export-verl``: validate, write the files, print where they are."""
    from ..runs.config import load_config

    cfg = load_config(args.config, overrides)
    for p in export(cfg, args.output_dir, source=args.config, model=args.model_path):
        print(p)
    return 0


def main(argv: list[str]) -> int:
    """``python -m sapo_lab.integrations.verl_export check-overrides [OVERRIDE ...]`` (run_verl.sh's guard)."""
    if not argv or argv[0] != "check-overrides":
        print("usage: python -m sapo_lab.integrations.verl_export check-overrides [OVERRIDE ...]", file=sys.stderr)
        return 2
    try:
        mapping.check_extra_overrides(argv[1:])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
