"""The SAPO assignment's grader (sapo_lab/course/grader.py, ``python -m sapo_lab grade``).

Full marks for a correct module written by wrapping sapo_lab; each planted wrong module loses exactly its part
and the grader names its mistake; a module that does not import, or imports sapo_lab.objective, exits 2 with
one line; the frozen outputs are what assignment/make_expected.py writes; the CS336 adapters agree with
sapo_lab; the training part runs the student's loss through the trainer (on the micro config).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sapo_lab.course import grader

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "tests" / "assignment_modules"
CORRECT = MODULES / "wraps_sapo_lab.py"

# planted module -> (the part it breaks, the mistake the grader must name)
PLANTED = {
    "wrong_sample_std": ("group_advantages", "sample std (divided by G - 1) instead of the population std"),
    "wrong_token_pool": ("masked_mean", "the two aggregations swapped"),
    "wrong_clip_max": ("clipped_surrogate_loss", "max instead of min (the pessimistic bound reversed)"),
    "wrong_gate_prefactor": ("sapo_gate", "the 4/tau prefactor missing"),
    "wrong_swapped_temperatures": ("sapo_loss", "tau_pos and tau_neg swapped"),
    "wrong_not_detached": ("sapo_loss", "behaviour log-probs not detached (gradient flows into the old policy)"),
    "wrong_gspo_padding": ("gspo_sequence_ratio", "padding included in the mean log ratio"),
    "wrong_batch_advantages": ("update_loss", "advantages normalised over the whole batch instead of per group"),
}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "sapo_lab", "grade", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_a_module_that_wraps_sapo_lab_gets_full_marks_and_exit_0():
    run = cli(str(CORRECT))
    assert run.returncode == 0, run.stdout + run.stderr
    total = next(line for line in run.stdout.splitlines() if line.startswith("total"))
    earned, points = total.split()[1].split("/")
    assert earned == points == str(sum(p for p, _ in grader.PARTS.values()))


def test_the_skeleton_scores_zero_and_says_not_implemented():
    report = grader.grade(grader.load_module(str(ROOT / "assignment" / "sapo_assignment.py")))
    assert all(p.earned == 0 and p.note == "not implemented" for p in report.parts)
    assert len(report.parts) == 7


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_each_planted_mistake_loses_its_part_and_is_named(name):
    part, mistake = PLANTED[name]
    report = grader.grade(grader.load_module(str(MODULES / f"{name}.py")))
    failed = [p for p in report.parts if p.earned < p.points]
    assert [p.part for p in failed] == [part]
    assert failed[0].mistake == mistake
    assert not report.passed


def test_a_planted_mistake_exits_1_through_the_command_line():
    run = cli(str(MODULES / "wrong_clip_max.py"))
    assert run.returncode == 1
    assert "most likely mistake: max instead of min" in run.stdout


@pytest.mark.parametrize("name, says", [
    ("does_not_import.py", "does not import: NameError"),
    ("imports_objective.py", "imports sapo_lab.objective"),
    ("no_such_module.py", "no such file"),
])
def test_an_ungradable_module_exits_2_with_one_line(name, says):
    run = cli(str(MODULES / name))
    assert run.returncode == 2
    assert run.stdout == "" and len(run.stderr.strip().splitlines()) == 1
    assert says in run.stderr and "Traceback" not in run.stderr


def test_an_unlisted_mistake_fails_without_a_wrong_name(tmp_path):
    odd = tmp_path / "odd.py"
    odd.write_text(f"import sys\nsys.path.insert(0, {str(MODULES)!r})\nfrom wraps_sapo_lab import *\n"
                   "def sapo_gate(ratio, tau):\n    return 2 * ratio\n")
    result = grader.grade_part(grader.load_module(str(odd)), "sapo_gate", grader.expected_outputs()["sapo_gate"])
    assert result.earned == 0 and result.mistake is None and "no listed mistake matches" in result.note


def test_the_frozen_outputs_are_what_the_generator_writes(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("make_expected", ROOT / "assignment" / "make_expected.py")
    gen = importlib.util.module_from_spec(spec)
    previous = torch.get_default_dtype()  # the generator sets float64 when it is imported
    try:
        spec.loader.exec_module(gen)
        monkeypatch.setattr(gen, "OUT", tmp_path / "expected.json")
        assert gen.main() == 0
    finally:
        torch.set_default_dtype(previous)
    assert json.loads((tmp_path / "expected.json").read_text()) == json.loads(grader.EXPECTED.read_text())


def test_the_cs336_adapters_agree_with_sapo_lab(monkeypatch):
    monkeypatch.setenv("SAPO_ASSIGNMENT", str(CORRECT))
    monkeypatch.syspath_prepend(str(MODULES))
    spec = importlib.util.spec_from_file_location("cs336_adapters", ROOT / "assignment" / "cs336_adapters.py")
    adapters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapters)
    import sapo_lab

    gen = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (12,), generator=gen).double()
    adv, _ = adapters.run_compute_group_normalized_rewards(rewards, 4)
    assert torch.allclose(adv, sapo_lab.group_advantages(rewards.reshape(3, 4)).reshape(-1))
    logp = (-1.0 + 0.3 * torch.randn(12, 5, generator=gen, dtype=torch.float64)).requires_grad_(True)
    old = logp.detach() + 0.2 * torch.randn(12, 5, generator=gen, dtype=torch.float64)
    mask = (torch.arange(5)[None, :] < torch.randint(1, 6, (12,), generator=gen)[:, None]).double()
    per_token, _ = adapters.run_compute_policy_gradient_loss(adv[:, None], logp, "sapo", old, response_mask=mask)
    loss = adapters.run_aggregate_loss_across_microbatch(per_token, mask, "sequence")
    (ours,) = torch.autograd.grad(loss, logp)
    (lib,) = torch.autograd.grad(sapo_lab.policy_loss(logp, old, adv, mask, loss_type="sapo").loss, logp)
    assert torch.allclose(ours, lib, atol=1e-12)
    with pytest.raises(NotImplementedError):
        adapters.run_compute_policy_gradient_loss(adv, logp, "grpo", old, 0.2)


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

