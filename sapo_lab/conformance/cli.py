"""``python -m sapo_lab conformance MODULE:FUNCTION``: audit a user's SAPO loss and print its verdict.

MODULE is an importable module name or a path to a ``.py`` file; FUNCTION may be dotted
(``losses:Sapo.loss``). The first line is ``CONFORMS`` or ``DIFFERS in N of M checks``, then
one line per difference; ``--details`` prints every check, ``--json`` the card as JSON.
Exit status: 0 conforms, 1 differs, 2 a usage error or a loss that cannot be audited (one line
on stderr).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys

DESCRIPTION = "Audit a SAPO loss against the paper's objective: CONFORMS, or DIFFERS with one line per difference."

EPILOG = """\
the loss:   fn(logp, old_logp, advantages, mask) -> scalar tensor (the loss to minimise)
  logp        (B, T) float, requires grad: the current policy's per-token log-probs
  old_logp    (B, T) float: the behaviour policy's log-probs, passed as data (caller contract:
              without gradient; the audit notes it when the loss does not detach them itself)
  advantages  (B,) float: one advantage per response
  mask        (B, T) bool: True on response tokens, False on padding
  dtype: float64 by default (--dtype float32, bfloat16, float16: tolerances follow the dtype)

exit status: 0 conforms, 1 differs, 2 usage error or a loss that raises on a plain batch

example:
  python -m sapo_lab conformance my_loss.py:sapo_loss --tau-pos 1.0 --tau-neg 1.05
  python -m sapo_lab conformance my_pkg.losses:sapo --details --json card.json

With one update per rollout (--updates-per-rollout 1) every ratio is 1: SAPO's gradient then
equals GRPO's and tau has no effect; the off-policy checks describe reused rollouts."""

ON_POLICY_NOTE = ("on-policy (one update per rollout): every ratio is 1, so SAPO's gradient equals GRPO's and "
                  "tau has no effect; the off-policy checks apply when a rollout is reused")


def add_flags(p) -> None:
    """The flags of ``python -m sapo_lab conformance`` on an argparse parser (raw-text help)."""
    p.description = DESCRIPTION
    p.epilog = EPILOG
    p.add_argument("target", help="MODULE:FUNCTION or path/to/file.py:FUNCTION")
    p.add_argument("--tau-pos", type=float, default=1.0, metavar="TAU",
                   help="temperature the loss uses for A > 0 (default 1.0)")
    p.add_argument("--tau-neg", type=float, default=1.05, metavar="TAU",
                   help="temperature the loss uses for A <= 0 (default 1.05)")
    p.add_argument("--dtype", default="float64", choices=("float64", "float32", "bfloat16", "float16"),
                   help="precision of the probes (default float64)")
    p.add_argument("--level", default="token", choices=("token", "sequence"), help="importance-sampling level expected")
    p.add_argument("--updates-per-rollout", type=int, default=None, metavar="N",
                   help="optimizer updates per rollout in your setting (1: on-policy, said in the verdict)")
    p.add_argument("--name", default=None, help="name on the card (default: the target)")
    p.add_argument("--details", action="store_true", help="print every check, not only the differences")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="FILE",
                   help="write the card as JSON to FILE (alone: print it instead of the text)")
    p.add_argument("--markdown", default=None, metavar="FILE", help="write the card as Markdown to FILE")


class ConformanceUsageError(ValueError):
    """A mistake on the command line or in the target: one line, exit status 2."""


def load_target(target: str):
    """The callable named by MODULE:FUNCTION (or FILE.py:FUNCTION)."""
    module_part, sep, attr_path = target.rpartition(":")
    if not sep or not module_part or not attr_path:
        raise ConformanceUsageError(f"target must be MODULE:FUNCTION, got {target!r}")
    try:
        if module_part.endswith(".py") or os.sep in module_part:
            if not os.path.isfile(module_part):
                raise ConformanceUsageError(f"no such file: {module_part}")
            name = os.path.splitext(os.path.basename(module_part))[0]
            spec = importlib.util.spec_from_file_location(name, module_part)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())  # a module in the working directory, as `python -m` finds it
            module = importlib.import_module(module_part)
    except ConformanceUsageError:
        raise
    except Exception as exc:  # ImportError, or anything the user's module raises while importing
        msg = str(exc).strip().splitlines()
        raise ConformanceUsageError(f"cannot import {module_part!r}: {type(exc).__name__}: "
                                    f"{msg[0] if msg else ''}".rstrip(": ")) from None
    obj = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ConformanceUsageError(f"{module_part!r} has no attribute {attr_path!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConformanceUsageError(f"{target} is not callable (a {type(obj).__name__})")
    return obj


def run_conformance(args) -> int:
    """Audit ``args.target`` (flags of ``python -m sapo_lab conformance``); print the verdict; 0 conforms, 1 differs.

    Usage mistakes, and a loss that raises on the plainest batch, raise :class:`ConformanceUsageError`,
    which the command line reports in one line (exit 2).
    """
    for flag, tau in (("--tau-pos", args.tau_pos), ("--tau-neg", args.tau_neg)):
        if not (math.isfinite(tau) and tau > 0):
            raise ConformanceUsageError(f"{flag} must be a finite number > 0, got {tau}")
    updates = getattr(args, "updates_per_rollout", None)
    if updates is not None and updates < 1:
        raise ConformanceUsageError(f"--updates-per-rollout must be >= 1, got {updates}")
    loss_fn = load_target(args.target)
    from .engine import AdapterError, audit  # torch is imported here, not for --help

    try:
        card = audit(loss_fn, name=args.name or args.target, tau_pos=args.tau_pos, tau_neg=args.tau_neg,
                     dtype=args.dtype, level=args.level, meta={"updates_per_rollout": updates})
    except AdapterError as exc:
        raise ConformanceUsageError(str(exc)) from None
    json_path = getattr(args, "json", None)
    for path, text in ((None if json_path == "-" else json_path, card.to_json), (args.markdown, card.to_markdown)):
        if path:
            try:
                with open(path, "w") as f:
                    f.write(text() + ("\n" if path == json_path else ""))
            except OSError as exc:
                raise ConformanceUsageError(f"cannot write {path}: {exc.strerror}") from None
    if json_path == "-":
        print(card.to_json())
    else:
        notes = (ON_POLICY_NOTE,) if updates == 1 else ()
        print(card.to_text(details=getattr(args, "details", False), notes=notes), end="")
    return 0 if card.passed else 1
