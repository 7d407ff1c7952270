"""Grade a student's SAPO assignment module against the frozen outputs in ``assignment/expected.json``.

``python -m sapo_lab grade PATH_TO_MODULE [--train]`` prints the points of each part and, where a part fails,
the plausible mistake whose frozen outputs the student's function reproduces. Exit status: 0 when every part
graded passes, 1 otherwise, 2 when the module cannot be graded (it does not import, or it imports
``sapo_lab.objective``, which would let it hand in the library's answer), always with one line.

The last part (``--train``) trains the ``cpu-tiny`` GPT-2 through sapo_lab's trainer with the student's
``sapo_loss`` in place of the library's and requires a held-out Pass@1 gain of at least ``TRAIN_MIN_GAIN``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

EXPECTED = Path(__file__).resolve().parents[2] / "assignment" / "expected.json"
AGGREGATIONS = ("per_response", "token_pool")
# part -> (points, argument names in the order of the skeleton's signature)
PARTS = {
    "group_advantages": (10, ["rewards"]),
    "masked_mean": (10, ["values", "mask", "aggregation"]),
    "clipped_surrogate_loss": (15, ["logp", "behavior_logp", "advantages", "mask", "eps"]),
    "sapo_gate": (10, ["ratio", "tau"]),
    "sapo_loss": (20, ["logp", "behavior_logp", "advantages", "mask", "tau_pos", "tau_neg"]),
    "gspo_sequence_ratio": (10, ["logp", "behavior_logp", "mask"]),
    "update_loss": (10, ["logp", "behavior_logp", "rewards", "mask", "tau_pos", "tau_neg"]),
}
TRAIN_POINTS = 15
TRAIN_CONFIG = "cpu-tiny"
# Pass@1 gain the training part requires: half of what a correct module reached when measured (cpu-tiny,
# seed 0: 0.300 -> 0.892 in 238 steps before the preset's 290 s limit, 121 s of process CPU time).
TRAIN_MIN_GAIN = 0.30
ATOL = RTOL = 1e-6


class NotGradable(Exception):
    """The module cannot be graded at all (exit 2, one line)."""


def positional(part: str, args: tuple, kwargs: dict) -> list:
    """The arguments of one call in the skeleton's order (keywords placed by name)."""
    names = PARTS[part][1]
    out = list(args)
    out += [kwargs[n] for n in names[len(args):] if n in kwargs]
    return out


def _grad(t):
    if t is None or not bool(torch.any(t != 0)):
        return None
    return t.tolist()


def observe(part: str, fn, kwargs: dict) -> dict:
    """Call ``fn`` as the grader calls the student's function and return what is compared (JSON-ready)."""
    kw = {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, list) else v for k, v in kwargs.items()}
    for k, v in list(kw.items()):
        if torch.is_tensor(v):
            kw[k] = v.detach().clone().to(torch.float64)
    if part == "group_advantages":
        return {"value": torch.as_tensor(fn(**kw)).detach().tolist()}
    if part == "masked_mean":
        return {agg: float(fn(kw["values"], kw["mask"], aggregation=agg)) for agg in AGGREGATIONS}
    if part == "sapo_gate":
        return {"value": torch.as_tensor(fn(**kw)).detach().tolist()}
    kw["logp"].requires_grad_(True)
    kw["behavior_logp"].requires_grad_(True)
    out = fn(**kw)
    total = out.sum() if out.ndim else out
    grads = torch.autograd.grad(total, [kw["logp"], kw["behavior_logp"]], allow_unused=True)
    value = out.detach().tolist() if out.ndim else float(out.detach())
    return {"value": value, "grad_logp": _grad(grads[0]), "grad_behavior_logp": _grad(grads[1])}


def close(a, b) -> bool:
    """Whether two recorded outputs (numbers, lists, dicts of them, or None) agree within the grader's tolerance."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isfinite(a) and abs(a - b) <= ATOL + RTOL * abs(b)
    return a == b


@dataclass
class PartResult:
    """One graded part: its points, the points earned, and a note (the mistake named, or why it failed)."""

    part: str
    points: int
    earned: int
    note: str = ""
    mistake: str | None = None


@dataclass
class Report:
    """Every part's result, in the handout's order."""

    parts: list[PartResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(p.earned == p.points for p in self.parts)

    def lines(self) -> list[str]:
        out = [f"{p.part:24s} {p.earned:3d}/{p.points:<3d} {p.note}".rstrip() for p in self.parts]
        total, earned = sum(p.points for p in self.parts), sum(p.earned for p in self.parts)
        out.append(f"{'total':24s} {earned:3d}/{total}")
        return out


def _refuses(path: Path) -> str | None:
    """Why the module may not be graded (it imports sapo_lab.objective), else None."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as exc:
        raise NotGradable(f"{path} does not import: SyntaxError: {exc.msg} (line {exc.lineno})") from None
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        if any(n == "sapo_lab.objective" or n.startswith("sapo_lab.objective.") for n in names):
            return f"{path} imports sapo_lab.objective (line {node.lineno}): hand in your own implementation"
    return None


def load_module(path: str):
    """Import the student's file as a fresh module; NotGradable with one line if it cannot be."""
    p = Path(path)
    if not p.is_file():
        raise NotGradable(f"{path}: no such file")
    reason = _refuses(p)
    if reason:
        raise NotGradable(reason)
    name = f"_sapo_assignment_{abs(hash(str(p.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, p)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(p.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - any failure of the student's import is reported in one line
        raise NotGradable(f"{path} does not import: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    finally:
        sys.path.remove(str(p.resolve().parent))
    return module


def expected_outputs(path: Path = EXPECTED) -> dict:
    """The frozen inputs, expected outputs and known mistakes' outputs of every part (assignment/expected.json)."""
    return json.loads(path.read_text())["parts"]


def grade_part(module, part: str, cases: list[dict]) -> PartResult:
    """Grade one function of the student's module on its frozen cases; name the known mistake it reproduces."""
    points = PARTS[part][0]
    fn = getattr(module, part, None)
    if not callable(fn):
        return PartResult(part, points, 0, f"missing: define {part}()")
    failing = []
    for i, case in enumerate(cases):
        try:
            got = observe(part, fn, case["inputs"])
        except NotImplementedError:
            return PartResult(part, points, 0, "not implemented")
        except Exception as exc:  # noqa: BLE001 - a student's error is reported, not raised
            return PartResult(part, points, 0, f"raises {type(exc).__name__}: {exc}".splitlines()[0][:160])
        if not close(got, case["expected"]):
            failing.append((i, got))
    if not failing:
        return PartResult(part, points, points, "ok")
    return _diagnose(part, points, cases, failing)


def _diagnose(part, points, cases, failing) -> PartResult:
    """Name the frozen mistake that reproduces the student's outputs on the most failing cases."""
    scores = {}
    for i, got in failing:
        for name, out in cases[i]["mistakes"].items():
            scores[name] = scores.get(name, 0) + close(got, out)
    best = max(scores, key=scores.get, default=None)
    if best is not None and scores[best] > 0:
        share = "" if scores[best] == len(failing) else f" (matches {scores[best]} of {len(failing)} failing cases)"
        return PartResult(part, points, 0, f"wrong; most likely mistake: {best}{share}", best)
    i, got = failing[0]
    expected = cases[i]["expected"]
    keys = [k for k in expected if not close(got.get(k), expected[k])]
    return PartResult(part, points, 0, f"wrong in case {i + 1} ({', '.join(keys)}); no listed mistake matches")


def grade(module, expected: dict | None = None) -> Report:
    """Grade every part of the student's module (the training part is separate: ``train_part``)."""
    expected = expected or expected_outputs()
    return Report([grade_part(module, part, expected[part]) for part in PARTS])


@contextmanager
def student_loss_in_trainer(module):
    """sapo_lab's trainer with the student's ``sapo_loss`` as the loss it differentiates; the library's
    ``policy_loss`` still supplies the logged diagnostics."""
    from sapo_lab.training import update

    library = update.policy_loss

    def with_student_loss(logp, behavior_logp, advantages, mask, **kwargs):
        out = library(logp, behavior_logp, advantages, mask, **kwargs)
        loss = module.sapo_loss(logp, behavior_logp, advantages, mask.to(logp.dtype),
                                tau_pos=kwargs["tau_pos"], tau_neg=kwargs["tau_neg"])
        return replace(out, loss=loss)

    update.policy_loss = with_student_loss
    try:
        yield
    finally:
        update.policy_loss = library


def train_part(module, config: str = TRAIN_CONFIG, overrides: dict | None = None, min_gain: float = TRAIN_MIN_GAIN,
               run_dir: str | None = None, log=None, reward_fn=None) -> tuple[PartResult, dict | None]:
    """Train with the student's loss; full points when the held-out Pass@1 gain reaches ``min_gain``."""
    from sapo_lab.runs.config import load_config
    from sapo_lab.training.trainer import train

    cfg = load_config(config, {**(overrides or {}), "loss.loss_type": "sapo"})
    with tempfile.TemporaryDirectory() as tmp, student_loss_in_trainer(module):
        try:
            summary = train(cfg, run_dir or str(Path(tmp) / "run"), reward_fn=reward_fn, log=log or (lambda m: None),
                            progress=log is not None)
        except NotImplementedError:
            return PartResult("training", TRAIN_POINTS, 0, "sapo_loss not implemented"), None
        except Exception as exc:  # noqa: BLE001
            return PartResult("training", TRAIN_POINTS, 0,
                              f"training failed: {type(exc).__name__}: {exc}".splitlines()[0][:160]), None
    gain = summary["pass1_gain"]
    minutes = summary.get("elapsed_s", float("nan")) / 60 if "elapsed_s" in summary else None
    took = f" in {minutes:.1f} min" if minutes is not None else ""
    verdict = "ok" if gain >= min_gain else "below the required gain"
    note = f"{verdict}: Pass@1 gain {gain:+.3f}{took} (required {min_gain:+.2f})"
    return PartResult("training", TRAIN_POINTS, TRAIN_POINTS if gain >= min_gain else 0, note), summary


def run_grade(path: str, train: bool = False, out=print) -> int:
    """The ``grade`` command: print the report; 0 all passed, 1 a part failed, 2 not gradable (one line)."""
    try:
        module = load_module(path)
    except NotGradable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = grade(module)
    if train:
        result, _ = train_part(module, log=None)
        report.parts.append(result)
    for line in report.lines():
        out(line)
    if not train:
        out(f"(training part not run: add --train to train {TRAIN_CONFIG} with your sapo_loss, "
            f"{TRAIN_POINTS} more points)")
    return 0 if report.passed else 1
