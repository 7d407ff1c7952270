"""``python -m sapo_lab conformance MODULE:FUNCTION``: audit a user's SAPO loss and print its report card.

MODULE is an importable module name or a path to a ``.py`` file; FUNCTION may be dotted
(``losses:Sapo.loss``). Exit status: 0 when the card passes, 1 when a property differs or
errors, 2 for a usage error (one line on stderr).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys


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
    """Audit ``args.target`` (flags of ``python -m sapo_lab conformance``) and print the card; 0 pass, 1 differs.

    Usage mistakes raise :class:`ConformanceUsageError`, which the command line reports in one line.
    """
    for flag, tau in (("--tau-pos", args.tau_pos), ("--tau-neg", args.tau_neg)):
        if not (math.isfinite(tau) and tau > 0):
            raise ConformanceUsageError(f"{flag} must be a finite number > 0, got {tau}")
    loss_fn = load_target(args.target)
    from .engine import AdapterError, audit  # torch is imported here, not for --help

    try:
        card = audit(loss_fn, name=args.name or args.target, tau_pos=args.tau_pos, tau_neg=args.tau_neg,
                     dtype=args.dtype, level=args.level)
    except AdapterError as exc:
        raise ConformanceUsageError(str(exc)) from None
    for path, text in ((args.json, card.to_json), (args.markdown, card.to_markdown)):
        if path:
            try:
                with open(path, "w") as f:
                    f.write(text() + ("\n" if path == args.json else ""))
            except OSError as exc:
                raise ConformanceUsageError(f"cannot write {path}: {exc.strerror}") from None
    print(card.to_markdown(), end="")
    return 0 if card.passed else 1
