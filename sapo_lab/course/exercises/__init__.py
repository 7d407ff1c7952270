"""The book's coded exercises, one module per chapter (``ch02`` ... ``ch10``), and the check cells' entry point.

A check cell calls ``check("03.advantages", normalized_advantages)``: the part before the dot is the chapter, whose
module lists its exercises in ``EXERCISES``. :func:`sapo_lab.course.checks.run_check` does the judging.
"""

from __future__ import annotations

import contextlib
import io
import pkgutil
from importlib import import_module

from ..checks import CheckFailed, Exercise, answered, expect, run_check

__all__ = ["CheckFailed", "Exercise", "all_exercises", "answered", "check", "check_quietly", "exercise", "expect"]


def _chapter_module(chapter: str):
    return import_module(f"{__name__}.ch{chapter}")


def exercise(exercise_id: str) -> Exercise:
    """The exercise named ``exercise_id`` ("CHAPTER.NAME", e.g. "03.advantages")."""
    chapter = exercise_id.split(".", 1)[0]
    try:
        found = {ex.id: ex for ex in _chapter_module(chapter).EXERCISES}
    except ModuleNotFoundError:
        found = {}
    if exercise_id not in found:
        raise KeyError(f"no exercise {exercise_id!r}; chapter {chapter} has {sorted(found) or 'none'}")
    return found[exercise_id]


def all_exercises() -> list[Exercise]:
    """Every registered exercise, in chapter order."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("ch"))
    return [ex for name in names for ex in import_module(f"{__name__}.{name}").EXERCISES]


def check(exercise_id: str, fn) -> None:
    """Judge the student's ``fn`` on exercise ``exercise_id``: one printed line when right or still a stub; a wrong
    answer raises :class:`CheckFailed` with one message (the input, got, expected, and the mistake named). Returns
    nothing, so a check cell shows only its message (:func:`check_quietly` gives the verdict as a bool)."""
    run_check(exercise(exercise_id), fn)


def check_quietly(exercise_id: str, fn) -> bool:
    """Whether ``fn`` passes exercise ``exercise_id``, printing nothing and raising nothing: for a later cell that
    uses the student's function only once it is right (and the reference otherwise)."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return run_check(exercise(exercise_id), fn)
        except CheckFailed:
            return False
