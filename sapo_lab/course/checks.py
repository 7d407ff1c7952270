"""Exercise checks that teach: call the student's function on fresh inputs and say what is wrong.

A check cell in the book is one line, ``check("03.advantages", normalized_advantages)``. The exercise it names
(:mod:`sapo_lab.course.exercises`) holds the reference answer, a generator of fresh inputs (never the numbers
of the exercise's statement) and the known mistakes (:mod:`sapo_lab.course.mistakes`). The check

* prints one line and returns True when the function agrees with the reference on every input, within a
  tolerance that accepts any mathematically right answer (relative, so large values are not held to an absolute
  bound; float32's where the exercise allows float32 arithmetic);
* prints "not done yet" and returns False when the function still raises ``NotImplementedError`` (the student
  notebook's stub), so that skipping an exercise breaks nothing after it;
* otherwise raises :class:`CheckFailed`, one message: the input, the value got, the value expected, and the
  known mistake it matches with its fix, or, when it matches none, how it differs (sign, factor, which element).

Where an exercise compares gradients (``grad_wrt``), the inputs named there are leaves that require a gradient
and the message says which gradient differs, or that none reached the input.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .mistakes import Mistake, _distinct, describe_difference

# A float32 result carries about 7 significant digits; a float64 one about 16.
FLOAT32_RTOL, FLOAT32_ATOL = 2e-5, 1e-6


class CheckFailed(AssertionError):
    """A check's verdict on a wrong answer; Jupyter shows its message alone, without a traceback."""

    def _render_traceback_(self):  # IPython's hook for a custom error display
        return [f"\033[31m{line}\033[0m" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


@dataclass(frozen=True)
class Exercise:
    """One coded exercise: what the student writes and how it is judged.

    ``function`` is the name the student defines; ``reference(**inputs)`` the right answer; ``cases()`` returns
    fresh keyword inputs (several, edge cases included); ``mistakes`` the known wrong answers, each computed from
    the same inputs. ``grad_wrt`` names inputs whose gradient is compared too. ``float32_ok`` accepts a float32
    result at float32's tolerance."""

    id: str
    function: str
    reference: Callable[..., object]
    cases: Callable[[], list[dict]]
    mistakes: Sequence[Mistake] = ()
    rtol: float = 1e-6
    atol: float = 1e-9
    grad_wrt: tuple[str, ...] = ()
    float32_ok: bool = True


@dataclass
class Outcome:
    """What one function gave on one input: its value (float64) and the gradients asked for (None: none flowed)."""

    value: torch.Tensor
    grads: dict
    float32: bool = False


def _prepare(case: dict, grad_wrt: tuple[str, ...]) -> dict:
    """A private copy of the inputs (a function that changes its inputs in place changes nothing else), with the
    inputs in ``grad_wrt`` made leaves that require a gradient."""
    inputs = {}
    for name, value in case.items():
        if torch.is_tensor(value):
            value = value.detach().clone()
            if name in grad_wrt:
                value.requires_grad_(True)
        else:
            value = copy.deepcopy(value)
        inputs[name] = value
    return inputs


def _as_tensor(value) -> torch.Tensor:
    if torch.is_tensor(value):
        return value
    if isinstance(value, (bool, int, float)) or (isinstance(value, (list, tuple)) and value):
        return torch.as_tensor(value, dtype=torch.float64)
    if hasattr(value, "__array__"):
        return torch.as_tensor(value.__array__(), dtype=torch.float64)
    raise TypeError(f"returned {type(value).__name__}, expected a number or a tensor")


def evaluate(fn: Callable, case: dict, grad_wrt: tuple[str, ...] = ()) -> Outcome:
    """Call ``fn(**case)`` on a private copy of the inputs and record its value and the gradients of its sum with
    respect to the inputs in ``grad_wrt``."""
    inputs = _prepare(case, grad_wrt)
    out = _as_tensor(fn(**inputs))
    is_float32 = out.dtype in (torch.float32, torch.float16, torch.bfloat16)
    grads = {}
    if grad_wrt:
        leaves = [inputs[name] for name in grad_wrt]
        if out.requires_grad:
            found = torch.autograd.grad(out.sum(), leaves, allow_unused=True)
        else:
            found = [None] * len(leaves)
        grads = {name: None if g is None else g.detach().to(torch.float64) for name, g in zip(grad_wrt, found, strict=True)}
    return Outcome(out.detach().to(torch.float64), grads, is_float32)


def _show(x, limit: int = 30) -> str:
    """A short, readable rendering of an input or an output."""
    if torch.is_tensor(x):
        if x.numel() <= limit:
            values = x.detach().to(torch.float64).reshape(-1).tolist() if x.is_floating_point() else x.tolist()
            if x.is_floating_point():
                body = _nested([f"{v + 0.0:.4g}" for v in values], tuple(x.shape))  # no "-0"
            else:
                body = str(values if x.dim() else values)
            return body
        return f"a {x.dtype} tensor of shape {tuple(x.shape)}"
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x)


def _show_pair(got, want) -> tuple[str, str]:
    """The got and expected rows: 4 significant digits where that shows a difference; where the two 4-digit forms
    read the same, each element pair printed with as many digits as it takes to tell them apart."""
    got_text, want_text = _show(got), _show(want)
    same_layout = (torch.is_tensor(got) and torch.is_tensor(want) and got.is_floating_point()
                   and want.is_floating_point() and tuple(got.shape) == tuple(want.shape))
    if got_text != want_text or not same_layout or "tensor of shape" in got_text:
        return got_text, want_text
    g = got.detach().to(torch.float64).reshape(-1).tolist()
    w = want.detach().to(torch.float64).reshape(-1).tolist()
    pairs = [_distinct(a + 0.0, b + 0.0) for a, b in zip(g, w, strict=True)]  # + 0.0: no "-0"
    shape = tuple(want.shape)
    return _nested([p[0] for p in pairs], shape), _nested([p[1] for p in pairs], shape)


def _nested(flat: list[str], shape: tuple) -> str:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return "[" + ", ".join(flat) + "]"
    step = len(flat) // shape[0]
    return "[" + ", ".join(_nested(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"


def _inputs_line(case: dict) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in case.items())


def _tolerance(ex: Exercise, got: Outcome) -> tuple[float, float]:
    """Float32's tolerance wherever the exercise allows float32 (a result computed in float32 and returned in
    float64 carries float32's rounding too); the exercise's own otherwise."""
    if ex.float32_ok:
        return max(ex.rtol, FLOAT32_RTOL), max(ex.atol, FLOAT32_ATOL)
    return ex.rtol, ex.atol


def _agree(got: Outcome, want: Outcome, rtol: float, atol: float) -> str | None:
    """None when the two outcomes agree; otherwise a short reason (which part differs)."""
    if got.value.numel() == 1 and want.value.numel() == 1:
        g, w = got.value.reshape(()), want.value.reshape(())
    elif tuple(got.value.shape) != tuple(want.value.shape):
        return "shape"
    else:
        g, w = got.value, want.value
    if not torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        return "value"
    for name, w_grad in want.grads.items():
        g_grad = got.grads.get(name)
        if (w_grad is None) != (g_grad is None):
            return f"grad:{name}"
        if w_grad is not None and not torch.allclose(g_grad, w_grad, rtol=rtol, atol=atol, equal_nan=True):
            return f"grad:{name}"
    return None


def _explain(ex: Exercise, reason: str, got: Outcome, want: Outcome, rtol: float, atol: float) -> str:
    """What differs, in words, when no known mistake matches."""
    if reason == "shape":
        return (f"it returned shape {tuple(got.value.shape)}, expected shape {tuple(want.value.shape)}"
                " (a sum or mean over the wrong dimension, or a missing keepdim?)")
    if reason == "value":
        nonfinite = ~torch.isfinite(got.value.reshape(want.value.shape)) & torch.isfinite(want.value)
        if bool(nonfinite.any()):
            return ("it returned nan or inf where the right answer is finite (a division by zero, or exp of a "
                    "large number?)")
        return describe_difference(got.value.reshape(want.value.shape), want.value, rtol, atol)
    name = reason.split(":", 1)[1]
    g_grad, w_grad = got.grads.get(name), want.grads.get(name)
    if g_grad is None:
        return (f"the value is right but no gradient reaches {name}: was the result detached (.item(), float(), "
                f"torch.tensor(...), .detach()) or computed from a detached copy?")
    if w_grad is None:
        return f"the value is right but a gradient reaches {name}, which should be detached"
    return f"the value is right but the gradient with respect to {name} differs: " + describe_difference(
        g_grad, w_grad, rtol, atol)


def _matching_mistake(ex: Exercise, fn_failures: list) -> Mistake | None:
    """The known mistake that reproduces the student's output on every failing input (and differs from the
    right answer on at least one of them)."""
    for mistake in ex.mistakes:
        distinguishable = 0
        for case, got, want, rtol, atol in fn_failures:
            try:
                wrong = evaluate(mistake.compute, case, ex.grad_wrt)
            except Exception:  # noqa: BLE001 - a mistake undefined on this input cannot be the student's
                break
            if _agree(wrong, want, ex.rtol, ex.atol) is not None:
                distinguishable += 1
            if _agree(got, wrong, rtol, atol) is not None:
                break
        else:
            if distinguishable:
                return mistake
    return None


def run_check(ex: Exercise, fn) -> bool:
    """Judge ``fn`` against exercise ``ex``; see the module's docstring."""
    if not callable(fn):
        raise CheckFailed(f"{ex.function} is a {type(fn).__name__}, not a function: define it with "
                          f"def {ex.function}(...):")
    failures = []
    cases = ex.cases()
    for case in cases:
        want = evaluate(ex.reference, case, ex.grad_wrt)
        try:
            got = evaluate(fn, case, ex.grad_wrt)
        except NotImplementedError:
            print(f"not done yet: {ex.function} still raises NotImplementedError. The rest of the notebook "
                  "runs without it; come back to this exercise when you are ready.")
            return False
        except Exception as exc:  # noqa: BLE001 - whatever the student's code raises is reported in one line
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise CheckFailed(f"{ex.function} raised {type(exc).__name__}: {first}\n"
                              f"  on the input: {_inputs_line(case)}") from None
        rtol, atol = _tolerance(ex, got)
        if _agree(got, want, rtol, atol) is not None:
            failures.append((case, got, want, rtol, atol))
    if not failures:
        print(f"correct: {ex.function} agrees with the reference on {len(cases)} fresh inputs.")
        return True
    # the smallest failing input is the easiest to read
    case, got, want, rtol, atol = min(failures, key=lambda f: sum(v.numel() for v in f[0].values()
                                                                  if torch.is_tensor(v)))
    reason = _agree(got, want, rtol, atol)
    if reason.startswith("grad:"):  # the value is right: show the gradient that is not
        name = reason.split(":", 1)[1]
        shown = (f"gradient with respect to {name}: ", got.grads.get(name), want.grads.get(name))
    else:
        shown = ("", got.value.reshape(want.value.shape) if reason != "shape" else got.value, want.value)
    label, got_shown, want_shown = shown
    got_text, want_text = _show_pair(got_shown, want_shown)
    lines = [f"{ex.function} is not right yet: it differs from the reference on {len(failures)} of "
             f"{len(cases)} fresh inputs.",
             f"  input:    {_inputs_line(case)}",
             f"  got:      {label}{'none' if got_shown is None else got_text}",
             f"  expected: {label}{'none' if want_shown is None else want_text}"]
    mistake = _matching_mistake(ex, failures)
    if mistake is not None:
        lines.append(f"  Known mistake: {mistake.name}.")
        lines.append(f"  Fix: {mistake.fix}.")
    else:
        lines.append(f"  What differs: {_explain(ex, reason, got, want, rtol, atol)}.")
    raise CheckFailed("\n".join(lines))



def answered(**values) -> bool:
    """For a check of stored values (a proof's numbers, not a function): False, with a "not done yet" line, while
    any value is still ``...`` (the student notebook's stub); True otherwise."""
    missing = [name for name, value in values.items() if value is ...]
    if missing:
        print(f"not done yet: {', '.join(missing)} still {'is' if len(missing) == 1 else 'are'} `...`. The rest of "
              "the notebook runs without it; come back to this exercise when you are ready.")
        return False
    return True


def expect(condition, message: str) -> None:
    """A check's assertion with its lesson: raise :class:`CheckFailed` with ``message`` unless ``condition``."""
    if not condition:
        raise CheckFailed(message)
