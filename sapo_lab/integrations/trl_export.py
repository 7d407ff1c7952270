"""``python -m sapo_lab export-trl``: a run directory that trains the same config on TRL with ``accelerate``.

:func:`export` writes ``train_trl.py`` (the whole config inside it; needs only ``sapo_lab`` and
TRL installed), ``accelerate_config.yaml`` for one process and ``README.md`` with the launch
lines for N GPUs and DeepSpeed ZeRO-2. :func:`run_trl` is what ``train_trl.py`` calls.
"""

from __future__ import annotations

import json
import os
import textwrap
import time

from ..runs.doctor import TRAINER_STATE
from ..runs.durable import atomic_write, write_json
from .trl import PROMPT_FORMATS, TESTED_TRL_VERSION, check_supported, per_device_batch_size

SCRIPT_TEMPLATE = '''#!/usr/bin/env python
"""Train {model_in_docstring} with TRL's GRPOTrainer on the config exported by `python -m sapo_lab export-trl`.

Needs sapo_lab (for the task, its verifier and the config mapping) and TRL {trl_version}.x, in an environment of
their own made from a sapo_lab checkout (see README.md):
{install}
One process:  accelerate launch --config_file accelerate_config.yaml train_trl.py
See README.md for N GPUs and DeepSpeed ZeRO-2.
"""

import argparse
import json
import sys

# The sapo_lab config this script was exported from (config.json of a `sapo_lab train` run).
CONFIG = json.loads(r"""{config_json}""")
DEFAULT_MODEL = {model!r}
PROMPT_FORMAT = {prompt_format!r}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL,
                    help="a local model directory, a hub name, or a sapo_lab size name (cold-started by sapo_lab)")
    ap.add_argument("--output-dir", default="trl-run", help="a new directory for checkpoints, final_model/ and summary")
    ap.add_argument("--max-steps", type=int, default=None, help="rollout steps (default: the config's)")
    ap.add_argument("--seed", type=int, default=None, help="default: the config's")
    ap.add_argument("--cpu", action="store_true", help="force CPU (with several processes: gloo)")
    args = ap.parse_args(argv)
    from sapo_lab.runs.config import config_from_dict
    from sapo_lab.integrations.trl_export import run_trl

    data = dict(CONFIG)
    data["optimization"] = dict(data["optimization"])
    if args.max_steps is not None:
        data["optimization"]["max_steps"] = args.max_steps
    if args.seed is not None:
        data["seed"] = args.seed
    if args.cpu:
        data["device"] = "cpu"
    try:
        cfg = config_from_dict(data)
        summary = run_trl(cfg, args.model, args.output_dir, prompt_format=PROMPT_FORMAT)
    except ValueError as exc:
        print(f"error: {{exc}}", file=sys.stderr)
        return 2
    print(json.dumps({{k: summary[k] for k in ("status", "optimizer_steps", "train_wall_s")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

ACCELERATE_CONFIG = """# One process (CPU or one GPU). For more, see README.md.
compute_environment: LOCAL_MACHINE
distributed_type: 'NO'
mixed_precision: 'no'
num_machines: 1
num_processes: 1
machine_rank: 0
main_training_function: main
use_cpu: false
"""

# The one install route both files give: TRL's pinned environment (requirements-trl.txt), kept apart from the
# book's .venv, with the checkout installed editable on top of it (sapo_lab is on no package index).
INSTALL_LINES = """\
python3 -m venv .venv-trl && . .venv-trl/bin/activate    # TRL's own environment; run in a sapo_lab checkout
pip install -r requirements-trl.txt && pip install --no-deps -e .    # TRL's pins, then sapo_lab itself"""

README_TEMPLATE = """# TRL run exported from sapo_lab

Config `{source}`, model `{model}`, prompt format `{prompt_format}`; TRL {trl_version}.x.
`train_trl.py` holds the whole config; `python -m sapo_lab export-trl` wrote it from the
declared mapping in `sapo_lab/integrations/trl.py` (fields TRL lacks are listed there as dropped).

One rollout batch is {responses} responses ({prompts} prompts x G = {g}), split into
K = {k} optimizer steps. TRL's per-device batch is responses / (K x processes), so the process
count must divide {per_step} (responses per optimizer step).

```bash
{install}
# one process (CPU or one GPU)
accelerate launch --config_file accelerate_config.yaml train_trl.py --output-dir run1
# N GPUs on one machine (DDP)
accelerate launch --multi_gpu --num_processes N train_trl.py --output-dir run-ddp
# N GPUs with DeepSpeed ZeRO-2 (pip install deepspeed)
accelerate launch --use_deepspeed --zero_stage 2 --num_processes N train_trl.py --output-dir run-zero2
# CPU, 2 processes (gloo): the multi-process path without a GPU (--multi_gpu only selects torchrun)
accelerate launch --multi_gpu --num_processes 2 train_trl.py --cpu --output-dir run-cpu2
```

Held-out Pass@1 of the result, with sapo_lab's evaluator:
`python -m sapo_lab eval --config config.json --model run1/final_model`

Which regime the gate was in (on-policy, inert, active; zero-spread groups; collapse), from the run's
`trainer_state.json`: `python -m sapo_lab doctor run1`. With `loss_type` sapo the trainer is TRL's
GRPOTrainer with SAPO's gate and ratio statistics added to its log as `sapo/...`
(`sapo_lab/integrations/trl_diagnostics.py`; the loss is TRL's, unchanged).
"""


def export(cfg, output_dir: str, *, source: str, model: str | None = None, prompt_format: str = "plain") -> list[str]:
    """Write train_trl.py, accelerate_config.yaml, config.json and README.md into ``output_dir``; return the paths.

    ``model`` overrides ``cfg.model.name_or_path``. Refuses (ValueError) a config TRL cannot
    reproduce and a non-empty directory that already holds an export.
    """
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"--prompt-format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")
    if model:
        cfg.model.name_or_path = model
    check_supported(cfg)
    per_device_batch_size(cfg, 1)  # the rollout batch must split into K optimizer steps
    from .output_folder import prepare_output_folder

    prepare_output_folder(output_dir, ("train_trl.py", "accelerate_config.yaml", "config.json", "README.md"))
    data = cfg.to_dict()
    r, k = cfg.rollout, cfg.optimization.steps_per_generation
    n = r.prompts_per_rollout * r.num_generations
    files = {
        "train_trl.py": SCRIPT_TEMPLATE.format(
            config_json=json.dumps(data, indent=2, sort_keys=True),
            model=cfg.model.name_or_path,
            # a quote in a folder's name must not end the docstring it is named in
            model_in_docstring=repr(cfg.model.name_or_path).replace('"', '\\"'),
            prompt_format=prompt_format,
            trl_version=TESTED_TRL_VERSION,
            install=textwrap.indent(INSTALL_LINES, "    "),
        ),
        "accelerate_config.yaml": ACCELERATE_CONFIG,
        "config.json": json.dumps(data, indent=2, sort_keys=True) + "\n",
        "README.md": README_TEMPLATE.format(
            source=source, model=cfg.model.name_or_path, prompt_format=prompt_format, trl_version=TESTED_TRL_VERSION,
            responses=n, prompts=r.prompts_per_rollout, g=r.num_generations, k=k, per_step=n // k,
            install=INSTALL_LINES,
        ),
    }
    paths = []
    for name, text in files.items():
        path = os.path.join(output_dir, name)
        atomic_write(path, text)
        paths.append(path)
    return paths


def _load_policy(cfg, model_name: str, splits, log):
    """(model, tokenizer): a size name gets sapo_lab's cached cold start, anything else is loaded as is."""
    from ..training.model import MODEL_SIZES, load_model_and_tokenizer

    if model_name not in MODEL_SIZES:
        return load_model_and_tokenizer(model_name)
    import torch
    from accelerate import PartialState

    from ..training.cold_start import get_cold_start

    cfg.model.name_or_path = model_name
    # One process trains the cold start, the others then read the cache.
    with PartialState(cpu=cfg.device == "cpu").main_process_first():
        model, tok, report = get_cold_start(cfg, splits, torch.device("cpu"), log=log)
    log(f"cold start: {report.get('updates')} updates, dev Pass@1 {report.get('dev_pass1')}")
    return model, tok


def run_trl(cfg, model_name: str, output_dir: str, *, prompt_format: str = "plain", log=print) -> dict:
    """Train ``cfg`` with ``trl.GRPOTrainer`` (for SAPO, with its gate statistics logged: :mod:`.trl_diagnostics`);
    write ``final_model/``, ``trainer_state.json`` (the log ``doctor`` reads) and ``trl_summary.json`` in ``output_dir``."""
    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from ..tasks import splits_for
    from .trl import default_task, reward_function, to_dataset, to_grpo_config
    from .trl_diagnostics import sapo_diagnostics_trainer

    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format must be one of {PROMPT_FORMATS}, got {prompt_format!r}")
    if os.path.exists(os.path.join(output_dir, "trl_summary.json")):
        raise ValueError(f"{output_dir} already holds a TRL run; choose another --output-dir")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    splits = splits_for(cfg)
    model, tok = _load_policy(cfg, model_name, splits, log)
    if prompt_format == "chat" and not getattr(tok, "chat_template", None):
        raise ValueError(f"prompt format 'chat' needs a tokenizer with a chat template; {model_name!r} has none")
    args = to_grpo_config(cfg, output_dir=os.path.join(output_dir, "trl"), logging_steps=cfg.optimization.steps_per_generation)
    reward = reward_function(default_task(cfg), eos_token_ids=[tok.eos_token_id])
    limit = cfg.max_train_time_s
    start = time.perf_counter()
    stopped = {"time_limit": False}

    class TimeLimit(TrainerCallback):  # sapo_lab's max_train_time_s (TRL has no wall-clock guard)
        def on_step_end(self, args, state, control, **kwargs):
            if limit and time.perf_counter() - start > limit:
                stopped["time_limit"] = True
                control.should_training_stop = True

    # SAPO's gate and ratio statistics join TRL's log (sapo/...; TRL logs none for sapo); the loss is TRL's.
    trainer_class = sapo_diagnostics_trainer(GRPOTrainer) if cfg.loss.loss_type == "sapo" else GRPOTrainer
    trainer = trainer_class(
        model=model, reward_funcs=reward, args=args, train_dataset=to_dataset(splits["train"], prompt_format),
        processing_class=tok, callbacks=[TimeLimit()],
    )
    trainer.train()
    wall = time.perf_counter() - start
    final = os.path.join(output_dir, "final_model")
    trainer.save_model(final)
    summary = {
        "status": "time_limit" if stopped["time_limit"] else "completed",
        "optimizer_steps": int(trainer.state.global_step),
        "train_wall_s": wall,
        "num_processes": int(trainer.accelerator.num_processes),
        "verifier_reasons_this_process": dict(reward.reasons),
        "model": model_name,
        "final_model": final,
    }
    if trainer.accelerator.is_main_process:
        tok.save_pretrained(final)
        trainer.state.save_to_json(os.path.join(output_dir, TRAINER_STATE))  # the log python -m sapo_lab doctor reads
        write_json(os.path.join(output_dir, "trl_summary.json"), summary)
    return summary


# ---------------------------------------------------------------- CLI


def export_trl_command(args, overrides) -> int:
    """``python -m sapo_lab export-trl``: validate, write the files, print where they are."""
    from ..runs.config import load_config

    cfg = load_config(args.config, overrides)
    paths = export(cfg, args.output_dir, source=args.config, model=args.model_path, prompt_format=args.prompt_format)
    for p in paths:
        print(p)
    return 0
