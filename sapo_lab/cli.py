"""``python -m sapo_lab train|eval|sample|compare|export-trl --config PRESET_OR_FILE [--output-dir DIR] [--key value ...]``.

``--key value`` overrides any config field, by dotted path (``--loss.loss_type grpo``)
or by its unique leaf name (``--loss_type grpo``). User mistakes print one line on
stderr and exit with status 2; a diverged run exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .errors import NonFiniteError, TrainingDiverged
from .integrations.trl_export import add_export_trl_parser, export_trl_command  # hook: export-trl
from .training.config import load_config


class UsageError(ValueError):
    """A mistake in the command line: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2, no usage dump
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m sapo_lab", description="Train and evaluate GPT-2 policies with SAPO / GRPO / GSPO.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, help_ in (
        ("train", "cold start, then RL; writes summary.json"),
        ("eval", "held-out Pass@1 / pass@k / greedy accuracy of a model"),
        ("sample", "print a few sampled answers with the verifier's verdicts"),
        ("compare", "train several loss types and seeds; write one results table"),
    ):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--config", default=None, help="preset name (cpu-tiny, gpu-gpt2-small) or JSON file (default cpu-tiny)")
        sp.add_argument("--output-dir", default=None, help="run directory (default: runs/<command>-...)")
        if name in ("train", "compare"):
            sp.add_argument(
                "--model",
                dest="model_path",
                default=None,
                help="policy to start from: a size name, a Hugging Face model directory or hub name "
                "(same as --model.name_or_path)",
            )
        if name == "train":
            sp.add_argument("--resume", action="store_true", help="continue the run in --output-dir")
        if name in ("train", "compare"):
            sp.add_argument("--overwrite", action="store_true", help="replace another run's files in the output folder")
        if name in ("eval", "sample"):
            sp.add_argument(
                "--model",
                dest="model_path",
                default=None,
                help="model directory or hub name (default: the config's model, cold-started)",
            )
            sp.add_argument("--split", default="eval", choices=("train", "dev", "eval"))
        if name == "sample":
            sp.add_argument("--num", type=int, default=8, help="number of prompts to show")
        if name == "compare":
            sp.add_argument("--loss-types", default="sapo,grpo,gspo")
            sp.add_argument("--seeds", default="0,1,2")
    add_export_trl_parser(sub)  # hook: export-trl
    sub.add_parser("conformance", help="audit a SAPO loss: conformance MODULE:FUNCTION (see its --help)")
    return p


def parse_overrides(rest: list[str]) -> dict:
    """``['--loss_type', 'grpo', '--seed=3']`` -> ``{'loss_type': 'grpo', 'seed': '3'}``."""
    out, i = {}, 0
    while i < len(rest):
        tok = rest[i]
        if not tok.startswith("--") or tok == "--":
            raise UsageError(f"unexpected argument {tok!r}; overrides are --key value")
        key = tok[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(rest) or rest[i + 1].startswith("--"):
                raise UsageError(f"override --{key} needs a value")
            value = rest[i + 1]
            i += 2
        out[key] = value
    return out


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _fmt_ci(p, ci) -> str:
    return f"{100 * p:5.1f}% [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def print_table(rows: list[dict], file=None) -> None:
    """The cold-start vs final Pass@1 table of one or more run summaries."""
    file = file or sys.stdout
    head = f"{'loss_type':<10}{'seed':>5}  {'cold-start Pass@1':<24}{'final Pass@1':<24}{'gain':>7}{'train s':>9}"
    print(head, file=file)
    print("-" * len(head), file=file)
    for r in rows:
        print(
            f"{r['loss_type']:<10}{r['seed']:>5}  {_fmt_ci(r['cold_start_pass1'], r['cold_start_pass1_ci95']):<24}"
            f"{_fmt_ci(r['final_pass1'], r['final_pass1_ci95']):<24}{100 * r['pass1_gain']:>+6.1f}"
            f"{r['train_wall_s']:>9.1f}",
            file=file,
        )


def _default_dir(command: str, cfg) -> str:
    return os.path.join("runs", f"{command}-{cfg.loss.loss_type}-seed{cfg.seed}")


def cmd_train(args, overrides) -> int:
    """``train``: cold start, then RL; prints the summary table."""
    from .training.trainer import train

    cfg = load_config(args.config, overrides)
    run_dir = args.output_dir or _default_dir("train", cfg)
    from .training.run_folder import requested_keys

    # On --resume only what the user typed is compared with the saved config.
    resume_keys = requested_keys(args.config if args.config_given else None, overrides)
    summary = train(cfg, run_dir, resume=args.resume, overwrite=args.overwrite, resume_keys=resume_keys, log=_log)
    if summary["status"] == "interrupted":
        return 130
    print_table([summary])
    print(f"run directory: {run_dir}")
    return 0


def _model_for(args, cfg):
    import torch

    from .tasks import splits_for, task_for
    from .training.cold_start import get_cold_start
    from .training.device import resolve_device
    from .training.model import load_model_and_tokenizer

    device = resolve_device(cfg.device)
    task = task_for(cfg)
    splits = splits_for(cfg, task)
    if args.model_path:
        model, tok = load_model_and_tokenizer(args.model_path)
        model.to(device)
    else:
        model, tok, _ = get_cold_start(cfg, splits, device, log=_log, task=task)
    torch.manual_seed(cfg.seed)
    return model.eval(), tok, splits, task


def cmd_eval(args, overrides) -> int:
    """``eval``: held-out Pass@1, pass@k and greedy accuracy of a model on one split."""
    from .training.evaluation import held_out_eval

    cfg = load_config(args.config, overrides)
    model, tok, splits, task = _model_for(args, cfg)
    res = held_out_eval(model, tok, cfg, splits[args.split], task.verify)
    print(f"Pass@1 ({res['num_samples']} samples/prompt, T={res['temperature']}): {_fmt_ci(res['pass1'], res['pass1_ci95'])}")
    for k in cfg.evaluation.pass_k:
        if k > 1:
            print(f"pass@{k} (unbiased): {100 * res[f'pass@{k}']:.1f}%")
    if "greedy_accuracy" in res:
        print(f"greedy accuracy: {100 * res['greedy_accuracy']:.1f}%")
    for d, v in res["by_difficulty"].items():
        print(f"  difficulty {d}: Pass@1 {100 * v['pass1']:.1f}% over {v['num_prompts']} prompts")
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        with open(os.path.join(args.output_dir, "eval.json"), "w") as f:
            json.dump(res, f, indent=2)
    return 0


def cmd_sample(args, overrides) -> int:
    """``sample``: print a few sampled answers with the verifier's verdicts."""
    import torch

    from .training.rollout import rollout

    cfg = load_config(args.config, overrides)
    if args.num < 1:
        raise UsageError(f"--num must be >= 1, got {args.num}")
    model, tok, splits, task = _model_for(args, cfg)
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(cfg.seed)
    batch = rollout(
        model,
        tok,
        splits[args.split][: args.num],
        reward_fn=task.verify,
        num_generations=1,
        max_completion_length=cfg.rollout.max_completion_length,
        temperature=cfg.rollout.temperature,
        generator=gen,
    )
    for ep in batch.episodes:
        print(f"{ep.problem.prompt}{ep.completion!s:<8} expected {ep.problem.answer:<6} {ep.reason}")
    return 0


def cmd_compare(args, overrides) -> int:
    """``compare``: train every loss type x seed, then write and print one results table."""
    from .training.trainer import train

    loss_types = [s for s in args.loss_types.split(",") if s]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not loss_types or not seeds:
        raise UsageError("--loss-types and --seeds must each name at least one value")
    configs = [
        (lt, s, load_config(args.config, {**overrides, "loss_type": lt, "seed": s})) for lt in loss_types for s in seeds
    ]  # validate every config before training any
    out_dir = args.output_dir or os.path.join("runs", f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
    rows = []
    for lt, s, cfg in configs:
        summary = train(cfg, os.path.join(out_dir, f"{lt}-seed{s}"), overwrite=args.overwrite, log=_log)
        if summary["status"] == "interrupted":
            return 130
        rows.append(
            {
                k: summary[k]
                for k in (
                    "loss_type",
                    "seed",
                    "cold_start_pass1",
                    "cold_start_pass1_ci95",
                    "final_pass1",
                    "final_pass1_ci95",
                    "pass1_gain",
                    "train_wall_s",
                    "final_greedy_accuracy",
                )
            }
        )
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(rows, f, indent=2)
    with open(os.path.join(out_dir, "results.txt"), "w") as f:
        print_table(rows, file=f)
    print_table(rows)
    print(f"results: {os.path.join(out_dir, 'results.json')}")
    return 0


COMMANDS = {
    "train": cmd_train,
    "eval": cmd_eval,
    "sample": cmd_sample,
    "compare": cmd_compare,
    "export-trl": export_trl_command,  # hook: export-trl
}


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 1 diverged, 2 user error, 130 interrupted).

    User errors (``UsageError`` and the ``ValueError`` that config, task, model and run
    checks raise) print one line; any other exception is an internal error and keeps its
    traceback (``SAPO_LAB_DEBUG=1`` shows tracebacks for user errors too).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["study"]:  # declared, resumable studies: sapo_lab/studies/study.py has its own parser
        from .studies.study import main_study

        return main_study(argv[1:])
    if argv[:1] == ["conformance"]:  # audit a user's SAPO loss: sapo_lab/conformance/cli.py has its own parser
        from .conformance.cli import main_conformance

        return main_conformance(argv[1:])
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight-loading bars would drown the training bar
    try:
        args, rest = _parser().parse_known_args(argv)
        args.config_given, args.config = args.config is not None, args.config or "cpu-tiny"
        overrides = parse_overrides(rest)
        if args.command in ("train", "compare") and args.model_path:
            overrides["model.name_or_path"] = args.model_path
        return COMMANDS[args.command](args, overrides)
    except TrainingDiverged as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except NonFiniteError:
        raise  # a NaN outside a training step is a bug, not a user's mistake
    except (UsageError, ValueError) as exc:
        if os.environ.get("SAPO_LAB_DEBUG"):
            raise
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
