"""``python -m sapo_lab COMMAND ...``: every command in one argparse tree, one error handler.

``train``, ``eval``, ``sample``, ``compare`` and ``export-trl`` take ``--config
PRESET_OR_FILE`` and ``--key value`` overrides of any config field, by dotted path
(``--loss.loss_type grpo``) or by its unique leaf name (``--loss_type grpo``); each
command's ``--help`` lists every key with its default and comment, generated from the
config tree. ``study`` runs a declared study, ``conformance`` audits a user's SAPO loss.
User mistakes print one line on stderr and exit with status 2; a diverged run exits with
status 1. Nothing heavy is imported before the command line is parsed, so ``--help``
answers without loading torch or transformers.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from .errors import NonFiniteError, TrainingDiverged
from .runs.config_keys import config_keys_help
from .tasks import SPLITS

DEFAULT_PRESET = "cpu-tiny"


class UsageError(ValueError):
    """A mistake in the command line: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2, no usage dump
        raise UsageError(message)


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


# ---------------------------------------------------------------- what follows the flags


def _config_overrides(args, rest: list[str]) -> dict:
    """A config command's ``--key value`` overrides; ``--config`` falls back to the default preset.

    Whether ``--config`` was typed is kept: on ``--resume`` only typed keys are compared.
    """
    args.config_given, args.config = args.config is not None, args.config or DEFAULT_PRESET
    overrides = parse_overrides(rest)
    _refuse_unknown_keys(overrides, args.command, args.own_flags)
    return overrides


def _refuse_unknown_keys(overrides: dict, command: str, own_flags: tuple[str, ...]) -> None:
    """A typed key that is no config key: one line naming the nearest config key or flag of the command
    (``--max_step`` -> ``--max_steps``, ``--output_dir`` -> ``--output-dir``), or where the keys are listed."""
    from .runs.config import UnknownKeyError, closest_key, resolve_key

    for key in overrides:
        try:
            resolve_key(key)
        except UnknownKeyError:
            near = closest_key(key, extra=own_flags)
            hint = f"did you mean --{near}?" if near else f"python -m sapo_lab {command} --help lists every key"
            raise UsageError(f"unknown config key --{key}; {hint}") from None


def _nothing_more(args, rest: list[str]) -> dict:
    """Commands without config overrides accept no further arguments."""
    if rest:
        raise UsageError(f"unrecognized arguments: {' '.join(rest)}")
    return {}


def _load_config(preset_or_file: str, overrides: dict):
    from transformers.utils import logging as hf_logging

    from .runs.config import load_config

    hf_logging.disable_progress_bar()  # weight-loading bars would drown the training bar
    return load_config(preset_or_file, overrides)


def _with_start_model(args, overrides: dict) -> dict:
    """``--model`` of train/compare is the policy to start from: ``model.name_or_path``."""
    return {**overrides, "model.name_or_path": args.model_path} if args.model_path else overrides


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

    overrides = _with_start_model(args, overrides)
    cfg = _load_config(args.config, overrides)
    run_dir = args.output_dir or _default_dir("train", cfg)
    from .runs.run_policy import requested_keys

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
    from .training.seeds import global_seed

    device = resolve_device(cfg.device)
    task = task_for(cfg)
    splits = splits_for(cfg, task)
    if args.model_path:
        model, tok = load_model_and_tokenizer(args.model_path)
        model.to(device)
    else:
        model, tok, _ = get_cold_start(cfg, splits, device, log=_log, task=task)
    torch.manual_seed(global_seed(cfg.seed))
    return model.eval(), tok, splits, task


def cmd_eval(args, overrides) -> int:
    """``eval``: held-out Pass@1, pass@k and greedy accuracy of a model on one split."""
    from .runs.durable import write_json
    from .training.evaluation import held_out_eval

    cfg = _load_config(args.config, overrides)
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
        write_json(os.path.join(args.output_dir, "eval.json"), res)
    return 0


def cmd_sample(args, overrides) -> int:
    """``sample``: print a few sampled answers with the verifier's verdicts."""
    import torch

    from .training.rollout import rollout
    from .training.seeds import sample_command_seed

    cfg = _load_config(args.config, overrides)
    if args.num < 1:
        raise UsageError(f"--num must be >= 1, got {args.num}")
    model, tok, splits, task = _model_for(args, cfg)
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(sample_command_seed(cfg.seed))
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
    from .runs.durable import atomic_write, write_json
    from .training.trainer import train

    overrides = _with_start_model(args, overrides)
    loss_types = [s for s in args.loss_types.split(",") if s]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {args.seeds!r}") from None
    if not loss_types or not seeds:
        raise UsageError("--loss-types and --seeds must each name at least one value")
    configs = [
        (lt, s, _load_config(args.config, {**overrides, "loss_type": lt, "seed": s})) for lt in loss_types for s in seeds
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
    write_json(os.path.join(out_dir, "results.json"), rows)
    table = io.StringIO()
    print_table(rows, file=table)
    atomic_write(os.path.join(out_dir, "results.txt"), table.getvalue())
    print_table(rows)
    print(f"results: {os.path.join(out_dir, 'results.json')}")
    return 0


def cmd_export_trl(args, overrides) -> int:
    """``export-trl``: write train_trl.py and an accelerate config that run this config on TRL."""
    from .integrations.trl_export import export_trl_command

    return export_trl_command(args, overrides)


def cmd_export_verl(args, overrides) -> int:
    """``export-verl``: write run_verl.sh, the data files and reward.py that run this config on verl."""
    from .integrations.verl_export import export_verl_command

    return export_verl_command(args, overrides)


def _choose_study_kernels(path: str) -> None:
    """Set the CPU kernel setting a study declares (``"kernels"``) before torch loads: torch reads it once."""
    from .runs.json_object import read_json_object
    from .runs.kernels import apply_kernel_setting

    declared = read_json_object(path, "study file").get("kernels", "native")
    apply_kernel_setting(declared if isinstance(declared, str) else str(declared))


def cmd_study(args, overrides) -> int:
    """``study``: run or continue a declared study, or (``--list``) list its runs and their status."""
    m = re.fullmatch(r"(\d+)/(\d+)", args.shard)
    if not m or not int(m[1]) < int(m[2]):
        raise ValueError(f"--shard must be I/N with 0 <= I < N, got {args.shard!r}")
    _choose_study_kernels(args.study)
    from .studies import expand_runs, load_declaration, run_status, run_study

    if args.list:
        study = load_declaration(args.study)
        for run in expand_runs(study, args.results_root):
            run_dir = os.path.join(args.results_root, study["name"], "runs", run["run_id"])
            print(f"{run_status(run_dir):<8} {run['run_id']}")
        return 0
    res = run_study(
        args.study,
        args.results_root,
        log=_log,
        progress=False if args.no_progress else None,
        shard=(int(m[1]), int(m[2])),
        methods=args.methods.split(",") if args.methods else None,
    )
    print(f"{res['status']}: {len(res['rows'])} finished runs; summary: {os.path.join(res['results'], 'summary.csv')}")
    return 130 if res["status"] == "interrupted" else 0


def cmd_replicate(args, overrides) -> int:
    """``replicate``: re-run one declared question of a committed study here and compare the answers."""
    m = re.fullmatch(r"(\d+)/(\d+)", args.shard)
    if not m or not int(m[1]) < int(m[2]):
        raise ValueError(f"--shard must be I/N with 0 <= I < N, got {args.shard!r}")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", args.study):
        raise ValueError(f"study {args.study!r} must be a study's name in --results-root (e.g. confirm_addition), "
                         "not a path")
    args.shard_pair, args.log_file = (int(m[1]), int(m[2])), sys.stderr
    from .runs.kernels import apply_kernel_setting

    apply_kernel_setting(args.kernels)  # before anything loads torch: torch reads the setting once
    from .studies.replicate import replicate_command

    return replicate_command(args)


def cmd_conformance(args, overrides) -> int:
    """``conformance``: audit a user's SAPO loss and print its report card (0 pass, 1 differs)."""
    from .conformance.cli import run_conformance

    return run_conformance(args)


def cmd_doctor(args, overrides) -> int:
    """``doctor``: the regime a run's logs show (on-policy, gate inert or active, zero-spread groups, collapse)."""
    from .runs.doctor import diagnose, read_run, report

    log = read_run(args.run_dir)
    reading = diagnose(log)
    print("\n".join(report(log, reading)), flush=True)
    if not args.no_map:
        from .evidence.doctor_map import map_lines

        try:
            lines = map_lines(reading.regime, reading.numbers["signal_removed_median"])
        except FileNotFoundError:  # outside a checkout, with no fetched results: the reading above still stands
            lines = ["gate map: not found here (no results/ folder next to an experiments/ folder above this one); "
                     "run inside a sapo_lab checkout for the map's nearest cell, or pass --no-map"]
        print("\n".join(lines))
    return 0


def cmd_grade(args, overrides) -> int:
    """``grade``: grade a SAPO assignment module (0 all parts pass, 1 a part fails, 2 not gradable, 3 all parts
    pass but not for credit: no sandbox here, or --allow-sapo-lab)."""
    from .course.grader import run_grade

    return run_grade(args.module, train=args.train, seed=args.seed, allow_sapo_lab=args.allow_sapo_lab,
                     time_limit=args.time_limit, budget=args.budget)


# ---------------------------------------------------------------- the flags of each command


def _config_flags(p: argparse.ArgumentParser) -> None:
    """``--config`` and, listed in the help, every config key as ``--KEY VALUE``."""
    from .runs.config_keys import preset_names

    p.add_argument("--config", default=None,
                   help=f"preset name ({', '.join(preset_names())}) or JSON file (default {DEFAULT_PRESET})")
    p.epilog = config_keys_help(DEFAULT_PRESET)
    p.set_defaults(read_rest=_config_overrides)


def _run_dir_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-dir", default=None, help="run directory (default: runs/<command>-...)")


def _start_model_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        dest="model_path",
        default=None,
        help="policy to start from: a size name, a Hugging Face model directory or hub name (same as --model.name_or_path)",
    )


def _overwrite_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true", help="replace another run's files in the output folder")


def _scored_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", dest="model_path", default=None,
                   help="model directory or hub name (default: the config's model, cold-started)")
    p.add_argument("--split", default="eval", choices=SPLITS)


def _train_flags(p: argparse.ArgumentParser) -> None:
    _config_flags(p)
    _run_dir_flag(p)
    _start_model_flag(p)
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir")
    _overwrite_flag(p)


def _eval_flags(p: argparse.ArgumentParser) -> None:
    _config_flags(p)
    _run_dir_flag(p)
    _scored_model_flags(p)


def _sample_flags(p: argparse.ArgumentParser) -> None:
    _eval_flags(p)
    p.add_argument("--num", type=int, default=8, help="number of prompts to show")


def _compare_flags(p: argparse.ArgumentParser) -> None:
    _config_flags(p)
    _run_dir_flag(p)
    _start_model_flag(p)
    _overwrite_flag(p)
    p.add_argument("--loss-types", default="sapo,grpo,gspo")
    p.add_argument("--seeds", default="0,1,2")


def _export_trl_flags(p: argparse.ArgumentParser) -> None:
    _config_flags(p)
    p.add_argument("--output-dir", required=True, help="directory for train_trl.py, accelerate_config.yaml, README.md")
    p.add_argument("--model", dest="model_path", default=None,
                   help="any Hugging Face causal LM (directory or hub name, e.g. Qwen/Qwen2.5-0.5B); default: the config's")
    p.add_argument("--prompt-format", default="plain",
                   help="plain (text prompts, the default) or chat (messages through the tokenizer's chat template)")


def _export_verl_flags(p: argparse.ArgumentParser) -> None:
    _config_flags(p)
    p.add_argument("--output-dir", required=True, help="directory for run_verl.sh, data/, reward.py, README.md")
    p.add_argument("--model", dest="model_path", default=None,
                   help="any Hugging Face causal LM (directory or hub name, e.g. Qwen/Qwen2.5-0.5B); default: the config's")


def _study_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="study file, e.g. experiments/main_comparison.json")
    p.add_argument("--results-root", default="results")
    p.add_argument("--shard", default="0/1", help="I/N: run only every N-th run starting at I (parallel processes)")
    p.add_argument("--methods", default=None, help="comma-separated: run only these methods' runs (e.g. primary first)")
    p.add_argument("--list", action="store_true", help="list the runs and their status; run nothing")
    p.add_argument("--no-progress", action="store_true")


def _replicate_flags(p: argparse.ArgumentParser) -> None:
    from .runs.kernels import KERNEL_SETTINGS  # the standard library only: --help stays fast

    p.add_argument("study", help="a committed study in --results-root, e.g. confirm_addition")
    p.add_argument("question", help="a declared test or tuning arm of it, e.g. Q1")
    p.add_argument("--results-root", default="results", help="the committed results (default results); "
                   "the replication goes to RESULTS_ROOT/replications/KERNEL_FINGERPRINT/STUDY/")
    p.add_argument("--kernels", default="native", choices=list(KERNEL_SETTINGS),
                   help="CPU kernel setting (sapo_lab/runs/kernels.py); avx2 on an AVX-512 machine comes close to "
                        "an AVX2-only one (its fingerprint and early decisions, not every float bit)")
    p.add_argument("--shard", default="0/1", help="I/N: train only every N-th run (parallel processes), as for study")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the producer's time for it; train nothing")
    p.add_argument("--no-progress", action="store_true")


def _grade_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("module", help="path of the student's module (assignment/sapo_assignment.py filled in)")
    p.add_argument("--train", action="store_true", help="also train cpu-tiny with the module's sapo_loss (minutes)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the fresh inputs graded beside the frozen ones (default: a new one, printed)")
    p.add_argument("--time-limit", type=float, default=120.0,
                   help="seconds each call of the student's code (or its import) may take")
    p.add_argument("--budget", type=float, default=300.0,
                   help="seconds all the student's calls may take together (the training part's sapo_loss calls "
                        "get a budget of their own of this size); what is left when it runs out is not graded")
    p.add_argument("--allow-sapo-lab", action="store_true",
                   help="instructor's switch: let the module import sapo_lab (refused by default)")
    p.epilog = ("exit status: 0 every part passed in the sandbox; 1 a part failed;\n"
                "2 not gradable (one line); 3 every part passed but not for credit\n"
                "(no sandbox on this machine, or --allow-sapo-lab)")


def _doctor_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN",
                   help="a sapo_lab run folder, or a TRL output folder (its trainer_state.json)")
    p.add_argument("--no-map", action="store_true", help="leave out what the book's gate map found nearby")


def _conformance_flags(p: argparse.ArgumentParser) -> None:
    from .conformance.cli import add_flags  # argparse only: no torch for --help

    add_flags(p)


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, the function that adds its flags, the function that runs it."""

    name: str
    help: str
    flags: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, dict], int]


COMMANDS = (
    Command("train", "cold start, then RL; writes summary.json", _train_flags, cmd_train),
    Command("eval", "held-out Pass@1 / pass@k / greedy accuracy of a model", _eval_flags, cmd_eval),
    Command("sample", "print a few sampled answers with the verifier's verdicts", _sample_flags, cmd_sample),
    Command("compare", "train several loss types and seeds; write one results table", _compare_flags, cmd_compare),
    Command("export-trl", "write train_trl.py + accelerate config to run this config on TRL", _export_trl_flags,
            cmd_export_trl),
    Command("export-verl", "write run_verl.sh (verl's main_ppo with Hydra overrides), data and reward to run this "
            "config on verl", _export_verl_flags, cmd_export_verl),
    Command("study", "run or continue a declared study (experiments/NAME.json -> results/NAME/)", _study_flags, cmd_study),
    Command("replicate", "re-run one declared question of a committed study here; both answers side by side",
            _replicate_flags, cmd_replicate),
    Command("conformance", "audit a SAPO loss fn(logp, old_logp, advantages, mask) -> scalar: "
            "path/to/file.py:FUNCTION or MODULE:FUNCTION",
            _conformance_flags, cmd_conformance),
    Command("grade", "grade a SAPO assignment module against frozen outputs: PATH_TO_MODULE", _grade_flags, cmd_grade),
    Command("doctor", "name the regime a run was in, from its logs: RUN (sapo_lab or TRL folder)", _doctor_flags,
            cmd_doctor),
)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: one subparser per entry of ``COMMANDS``."""
    p = _Parser(prog="python -m sapo_lab", description="Train and evaluate GPT-2 policies with SAPO / GRPO / GSPO.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for c in COMMANDS:
        sp = sub.add_parser(c.name, help=c.help, description=c.help, formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.set_defaults(run=c.run, read_rest=_nothing_more)
        c.flags(sp)
        # the command's own flags, offered beside the config keys when a typed option is unknown
        sp.set_defaults(own_flags=tuple(s[2:] for a in sp._actions for s in a.option_strings if s.startswith("--")))
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 1 diverged or a failed audit, 2 user error, 130 interrupted).

    User errors (``UsageError`` and the ``ValueError`` that config, task, model, study and
    run checks raise) print one line; any other exception is an internal error and keeps
    its traceback (``SAPO_LAB_DEBUG=1`` shows tracebacks for user errors too).
    """
    argv = sys.argv[1:] if argv is None else argv
    try:
        args, rest = build_parser().parse_known_args(argv)
        return args.run(args, args.read_rest(args, rest))
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
    except BrokenPipeError:  # `... | head`: the reader has gone; end quietly, as a tool killed by SIGPIPE does
        _quiet_stdout()
        return 128 + 13


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush into the closed pipe raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured): nothing will flush into a pipe
        pass
