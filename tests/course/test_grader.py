"""The SAPO assignment's grader (sapo_lab/course/grader.py, ``python -m sapo_lab grade``).

Full marks for a correct module written from the handout alone (plain torch); each planted wrong module loses
exactly its part and the grader names its mistake; a module that does not import, or imports sapo_lab, exits 2
with one line; the frozen outputs are what assignment/make_expected.py writes (at the grader's tolerance); the
training part runs the student's loss through the trainer (on the micro config). The CS336 adapters are tested in
test_cs336_adapters.py. The hostile modules are in test_grader_isolation.py, the naming of mistakes in test_grader_naming.py.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _grade_cli import grade_in_process

from sapo_lab.course import grader

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "tests" / "course" / "assignment_modules"
CORRECT = MODULES / "from_handout.py"
WRAPS_LIBRARY = MODULES / "wraps_sapo_lab.py"
SEED = 20261205

# planted module -> (the part it breaks, the mistake the grader must name: a name in sapo_lab/course/mistakes.py,
# the catalogue the book's exercise checks share)
PLANTED = {
    "wrong_sample_std": ("group_advantages", "divided by the sample standard deviation (G - 1 in the variance)"),
    "wrong_token_pool": ("masked_mean", "the two aggregations swapped"),
    "wrong_clip_max": ("clipped_surrogate_loss", "max instead of min: the pessimistic bound turned into an optimistic one"),
    "wrong_gate_prefactor": ("sapo_gate", "the 4 / tau prefactor left out (a bare sigmoid)"),
    "wrong_swapped_temperatures": ("sapo_loss", "tau_pos and tau_neg swapped"),
    "wrong_not_detached": ("sapo_loss",
                           "behavior_logp not detached: a gradient flows into the old policy's log-probabilities"),
    "wrong_gspo_padding": ("gspo_sequence_ratio", "padding tokens counted in the mean log-ratio"),
    "wrong_batch_advantages": ("update_loss", "advantages normalised over the whole batch instead of within each group"),
    # a float64 result whose numbers hold float32's rounding: named from the numbers, whatever dtype is claimed
    "wrong_float32_constant": ("sapo_gate", "float32 precision"),
}


def one_file(name: str, folder: Path) -> Path:
    """The planted module ``name`` as a student hands it in, one file: its imports of the handout module replaced
    by that module's text (in the sandbox a submission has no file beside it)."""
    lines, inlined = [], False
    for line in (MODULES / name).read_text().splitlines():
        if line.startswith("from from_handout import"):
            if not inlined:
                lines.append(CORRECT.read_text())
            inlined = True
            for imported in line.split("import", 1)[1].split("#")[0].split(","):
                original, _, alias = imported.strip().partition(" as ")
                if alias:  # "from from_handout import masked_mean as _right"
                    lines.append(f"{alias} = {original}")
        else:
            lines.append(line)
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def cli(*args):
    """``python -m sapo_lab grade ARGS`` in an interpreter of its own: the entry point, and a stderr that holds
    nothing but the grader's line (no warning printed while the package loads)."""
    return subprocess.run([sys.executable, "-m", "sapo_lab", "grade", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def total_line(stdout: str) -> tuple[str, str]:
    total = next(line for line in stdout.splitlines() if line.startswith("total"))
    earned, points = total.split()[1].split("/")
    return earned, points


def test_a_module_written_from_the_handout_gets_full_marks_and_exit_0():
    # catches: a grader requirement the handout does not state (e.g. the GSPO detach once was), or a fresh input
    # on which the plain definitions and sapo_lab's reference part
    run = cli(str(CORRECT), "--seed", str(SEED))
    assert run.returncode == 0, run.stdout + run.stderr
    assert total_line(run.stdout) == (str(sum(p for p, _ in grader.PARTS.values())),) * 2
    assert f"seed {SEED}" in run.stdout.splitlines()[0]


def test_a_module_that_wraps_sapo_lab_is_refused_unless_the_instructor_allows_it():
    # catches: the switch ignored (refused both ways, or allowed both ways)
    refused = grade_in_process(str(WRAPS_LIBRARY), "--seed", str(SEED))
    assert refused.returncode == 2 and refused.stdout == ""
    assert "imports sapo_lab" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    allowed = grade_in_process(str(WRAPS_LIBRARY), "--seed", str(SEED), "--allow-sapo-lab")
    assert allowed.returncode == 3, allowed.stdout + allowed.stderr  # passed, but not for credit
    assert "not for credit" in allowed.stdout


def test_a_passing_run_without_the_sandbox_exits_3_not_0(monkeypatch, tmp_path):
    """An autograder that reads only the exit status must not give credit for a run the hook alone guarded
    (catches a not-isolated run that passes with exit 0, and a 3 given to a failing one)."""
    monkeypatch.setenv("SAPO_LAB_GRADE_NO_SANDBOX", "1")
    run = grade_in_process(str(CORRECT), "--seed", str(SEED))
    assert run.returncode == 3, run.stdout + run.stderr
    assert run.stdout.splitlines()[1].startswith("NOT ISOLATED") and "not for credit" in run.stdout.splitlines()[1]
    failing = grade_in_process(str(one_file("wrong_clip_max.py", tmp_path)), "--seed", str(SEED))
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "3 every part passed but not for credit" in grade_in_process("--help").stdout  # said where it is read


def test_the_skeleton_scores_zero_and_says_not_implemented():
    report = grader.grade(str(ROOT / "assignment" / "sapo_assignment.py"), seed=SEED)
    assert all(p.earned == 0 and p.note == "not implemented" for p in report.parts)
    assert len(report.parts) == 7


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_each_planted_mistake_loses_its_part_and_is_named(name, tmp_path):
    # catches: a part graded with the student's own other functions (one bug costing several parts), or a
    # mistake no longer recognised from the outputs the catalogue computes on each case's inputs
    part, mistake = PLANTED[name]
    report = grader.grade(str(one_file(f"{name}.py", tmp_path)), seed=SEED)
    failed = [p for p in report.parts if p.earned < p.points]
    assert [p.part for p in failed] == [part]
    assert failed[0].mistake == mistake
    assert not report.passed


def test_float32_rounding_is_judged_from_the_numbers_not_from_the_claimed_dtype():
    """The student's process reports each result's dtype, and a module can rewrite that report: a result rounded
    to float32 but claimed float64 must still fail as float32 (catches a grader that trusts the claim), while a
    float64 result that differs in its last digits (another order of the same sums) must pass (catches a
    precision test stricter than float64 itself)."""
    from sapo_lab.course.sandbox import observe
    from sapo_lab.course.substitutes import sapo_gate

    kwargs = {"ratio": [[0.7, 1.0, 1.3], [2.5, 0.2, 1.05]], "tau": 1.05}
    exp = observe("sapo_gate", sapo_gate, kwargs)
    claim = {"value": {"shape": [2, 3], "dtype": "float64"}}
    rounded = {key: torch.tensor(v, dtype=torch.float32).double().tolist() for key, v in exp.items()}
    assert grader.close(rounded, exp)  # within the value tolerance: only the precision test can see it
    result = grader.judge_part("sapo_gate", [], [(exp, {"outputs": rounded, "meta": claim})])
    assert result.earned == 0 and result.mistake == "float32 precision", result
    assert "float32" in result.note and "torch.tensor(0.2)" in result.note
    reordered = {key: [[x * (1 + 3e-15) for x in row] for row in v] for key, v in exp.items()}
    result = grader.judge_part("sapo_gate", [], [(exp, {"outputs": reordered, "meta": claim})])
    assert result.earned == result.points, result


def test_a_planted_mistake_exits_1_through_the_command_line(tmp_path):
    run = grade_in_process(str(one_file("wrong_clip_max.py", tmp_path)))
    assert run.returncode == 1
    assert "most likely mistake: max instead of min" in run.stdout


@pytest.mark.parametrize("name, says", [
    ("does_not_import.py", "does not import: NameError"),
    ("imports_objective.py", "imports sapo_lab.objective"),
    ("no_such_module.py", "no such file"),
])
def test_an_ungradable_module_exits_2_with_one_line(name, says, tmp_path):
    run = cli(str(one_file(name, tmp_path) if (MODULES / name).exists() else MODULES / name))
    assert run.returncode == 2
    assert run.stdout == "" and len(run.stderr.strip().splitlines()) == 1
    assert says in run.stderr and "Traceback" not in run.stderr


def test_a_bad_time_limit_exits_2_with_one_line():
    run = cli(str(CORRECT), "--time-limit", "0")
    assert run.returncode == 2 and "--time-limit" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_the_frozen_outputs_are_what_the_generator_writes(tmp_path, monkeypatch):
    # compared at the grader's tolerance: another CPU kind changes float64 results in the last bit
    spec = importlib.util.spec_from_file_location("make_expected", ROOT / "assignment" / "make_expected.py")
    gen = importlib.util.module_from_spec(spec)
    previous = torch.get_default_dtype()  # the generator sets float64 when it is imported
    try:
        spec.loader.exec_module(gen)
        monkeypatch.setattr(gen, "OUT", tmp_path / "expected.json")
        assert gen.main() == 0
    finally:
        torch.set_default_dtype(previous)
    regenerated = json.loads((tmp_path / "expected.json").read_text())
    assert grader.close(regenerated, json.loads(grader.EXPECTED.read_text()))


def first_number_path(x, path=()):
    if isinstance(x, dict):
        for k, v in x.items():
            found = first_number_path(v, (*path, k))
            if found is not None:
                return found
    elif isinstance(x, list):
        for i, v in enumerate(x):
            found = first_number_path(v, (*path, i))
            if found is not None:
                return found
    elif isinstance(x, float) and x != 0:
        return path
    return None


def test_the_frozen_comparison_fails_on_a_value_off_by_more_than_the_tolerance_or_a_changed_structure():
    # catches: the comparison above loosened to "same keys", or the tolerance loosened a thousandfold
    frozen = json.loads(grader.EXPECTED.read_text())
    path = first_number_path(frozen["parts"]["sapo_loss"][0]["expected"])
    off = copy.deepcopy(frozen)
    holder = off["parts"]["sapo_loss"][0]["expected"]
    for key in path[:-1]:
        holder = holder[key]
    value = holder[path[-1]]
    holder[path[-1]] = value + 10 * (1e-6 + 1e-6 * abs(value))  # ten times the tolerance the handout states
    assert not grader.close(off, frozen)
    holder[path[-1]] = value + 0.1 * (1e-6 + 1e-6 * abs(value))
    assert grader.close(off, frozen)
    renamed = copy.deepcopy(frozen)
    renamed["generated_by"] = "something else"
    assert not grader.close(renamed, frozen)
    shorter = copy.deepcopy(frozen)
    shorter["parts"]["sapo_gate"][0]["expected"]["value"].pop()
    assert not grader.close(shorter, frozen)


@pytest.mark.slow
def test_the_training_part_trains_with_the_students_loss(monkeypatch):
    """On the micro config: the student's sapo_loss is what the trainer differentiates (it is called, and a
    loss that raises fails the part in one line), and the library's policy_loss is restored afterwards."""
    from _micro import MICRO, parity_reward

    from sapo_lab.training import update

    module = grader.load_module(str(CORRECT))
    calls = []
    real = module.sapo_loss
    monkeypatch.setattr(module, "sapo_loss", lambda *a, **k: calls.append(1) or real(*a, **k))
    before = update.policy_loss
    result, summary = grader.train_part(module, "micro", MICRO, min_gain=-1.0, reward_fn=parity_reward)
    assert update.policy_loss is before
    assert calls and result.earned == result.points and summary["pass1_gain"] is not None

    def broken(*a, **k):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(module, "sapo_loss", broken)
    result, _ = grader.train_part(module, "micro", MICRO, min_gain=-1.0, reward_fn=parity_reward)
    assert result.earned == 0 and result.note.startswith("training failed: RuntimeError: shape mismatch")



def test_the_handout_states_what_the_grader_checks():
    # catches: a grader constant changed without the handout (points, tolerance, time limit), or a checked rule
    # (the GSPO detach once) missing from the page a student follows
    handout = (ROOT / "book" / "assignment_sapo.md").read_text()
    rows = {}
    for line in handout.splitlines():  # "- **Part N, `name`** (P points; returns ...): what it computes"
        m = re.match(r"- \*\*Part \d, (.+?)\*\* \((\d+) points", line)
        if m:
            rows[m[1].split("(")[0].strip("` ")] = int(m[2])
    assert {k: v for k, v in rows.items() if k in grader.PARTS} == {k: p for k, (p, _) in grader.PARTS.items()}
    assert rows["training"] == grader.TRAIN_POINTS
    assert grader.ATOL == grader.RTOL == 1e-6 and "tolerance of $10^{-6}$" in handout
    assert f"`--time-limit`, {grader.TIME_LIMIT_S:g} s by default" in handout
    assert f"`--budget`, {grader.BUDGET_S:g} s by default" in handout
    assert f"a fixed {grader.TRAIN_STEPS} steps" in handout and "gain of 0.14" in handout
    from sapo_lab.cli import build_parser

    assert build_parser().parse_args(["grade", "m.py"]).time_limit == grader.TIME_LIMIT_S
    assert build_parser().parse_args(["grade", "m.py"]).budget == grader.BUDGET_S
    for rule in ("no gradient may reach\n  `behavior_logp`", "in all four parts, the GSPO ratio included", "0-d tensor",
                 "float64 tensor", "population standard deviation", "torch.sigmoid"):
        assert rule in handout, rule
