"""The grader names what is wrong, one line per part, and each part is graded on its own.

One module carries a different kind of error in each part (an overflowing sigmoid, a loss that is not 0-d,
float32, an undetached GSPO ratio, an unlisted wrong value): each part's line names its own. A masked_mean bug in a
module whose losses call masked_mean costs masked_mean alone. The verdict on a part is tested on recorded outputs
too: a value off by ten times the tolerance fails, and so does a part wrong only in its last frozen case.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest
import torch

from sapo_lab.course import grader, reference, substitutes

ROOT = Path(__file__).resolve().parents[2]
HANDOUT = ROOT / "tests" / "course" / "assignment_modules" / "from_handout.py"
SEED = 11


def planted(tmp_path, replacements: dict) -> Path:
    """The handout module with some functions' bodies replaced (so its other functions call the planted one)."""
    text = HANDOUT.read_text()
    for old, new in replacements.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "submission.py"
    path.write_text(text)
    return path


def test_each_part_names_its_own_error(tmp_path):
    # catches: a NaN, a shape, a dtype, a detach or a plain wrong value reported as "wrong in case 1" with
    # nothing named, or an error in one part reported in another
    module = planted(tmp_path, {
        "return 4.0 / tau * torch.sigmoid(tau * (ratio - 1.0))":
            "u = torch.exp(tau * (ratio - 1.0))\n    return 4.0 / tau * u / (1 + u)",
        'return masked_mean(-adv * sapo_gate(ratio, tau), mask, "per_response")':
            "m = mask.to(logp.dtype)\n    return ((-adv * sapo_gate(ratio, tau)) * m).sum(1) / m.sum(1)",
        "return (rewards - mean) / (std + eps)": "return ((rewards - mean) / (std + eps)).float()",
        "((logp - behavior_logp.detach()) * m)": "((logp - behavior_logp) * m)",
        'return masked_mean(token_loss, mask, "per_response")':
            'return masked_mean(token_loss, mask, "per_response") * 1.01',
    })
    report = grader.grade(str(module), seed=SEED)
    notes = {p.part: p.note for p in report.parts}
    assert report.part("masked_mean").earned == 10 and report.part("update_loss").earned == 10, report.lines()
    assert notes["sapo_gate"].startswith("nan at value[") and "exp(x) / (1 + exp(x))" in notes["sapo_gate"]
    assert "fresh case" in notes["sapo_gate"]  # the frozen ratios stay below 3, where it does not overflow
    assert notes["sapo_loss"].startswith("wrong shape: returns (") and "expected ()" in notes["sapo_loss"]
    assert notes["group_advantages"].startswith("wrong dtype: returns float32")
    assert notes["gspo_sequence_ratio"].startswith("wrong; most likely mistake: behavior_logp not detached")
    assert "; fix: detach behavior_logp" in notes["gspo_sequence_ratio"]
    # an unlisted mistake: what differs, in words: the value got and expected, and the scale its gradient shows
    clipped = notes["clipped_surrogate_loss"]
    assert clipped.startswith("wrong value: largest difference at the value: got "), clipped
    assert "; the gradient with respect to logp: every element is 1.01 times the right one" in clipped, clipped
    got, expected = map(float, re.search(r"got (\S+), expected (\S+?);", clipped).groups())
    assert math.isclose(got, 1.01 * expected, rel_tol=2e-5)


def test_a_masked_mean_bug_costs_masked_mean_alone(tmp_path):
    # catches: a part graded with the student's own masked_mean (the bug then costs four parts: 30/85)
    module = planted(tmp_path, {"per_response = (values * m).sum(dim=1) / m.sum(dim=1)":
                                "per_response = (values * m).sum(dim=1) / m.shape[1]"})
    report = grader.grade(str(module), seed=SEED)
    assert [p.part for p in report.parts if p.earned < p.points] == ["masked_mean"], report.lines()
    assert report.part("masked_mean").note.startswith("wrong per_response; most likely mistake: padding counted")


def test_no_process_can_ask_for_the_answer_of_a_part_it_grades():
    # catches: a process offered a stand-in for the part it grades (a module could call it instead of its own)
    for graded, substituted in substitutes.PROCESSES:
        assert not set(graded) & set(substituted)
    assert sorted(p for graded, _ in substitutes.PROCESSES for p in graded) == sorted(grader.PARTS)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_substitutes_agree_with_sapo_labs_references_on_fresh_inputs(seed):
    # catches: a substitute that departs from the definition (a correct module's other parts would then fail)
    checked = 0
    for part, calls in grader.fresh_calls(seed).items():
        fn = getattr(substitutes, part, None)
        if fn is None:  # update_loss: nothing is graded above it, so it has no substitute
            continue
        for kwargs, expected in calls:
            assert grader.close(grader.observe(part, fn, kwargs), expected), part
            checked += 1
    assert checked == 3 * (len(grader.PARTS) - 1) + 1  # and GSPO's long responses


def test_the_fresh_inputs_hold_what_the_issue_asked_for():
    # catches: fresh batches without far ratios (exp(x)/(1+exp(x)) would pass), without a G = 2 group, or unpadded
    cases = reference.fresh_cases(3)
    ratios = torch.cat([torch.exp(c["logp"] - c["behavior_logp"])[c["mask"] > 0] for c in cases])
    assert float(ratios.max()) > 710 and float(ratios.min()) < 0.2
    assert any(c["rewards"].shape[1] == 2 for c in cases)
    assert all(bool((c["mask"].sum(1) < c["mask"].shape[1]).any()) for c in cases)
    assert reference.fresh_cases(3)[0]["logp"].equal(cases[0]["logp"])
    assert not reference.fresh_cases(4)[0]["logp"][:, :1].equal(cases[0]["logp"][:, :1])


def recorded(part: str):
    """The frozen cases of ``part`` and, as the student's results, its expected outputs (a correct module)."""
    cases = grader.expected_outputs()[part]
    return cases, [{"outputs": copy.deepcopy(c["expected"]), "meta": {"value": {"shape": _shape(c), "dtype": "float64"}}}
                   for c in cases]


def _shape(case):
    return grader._shape(case["expected"]["value"])


def test_a_value_off_by_ten_times_the_tolerance_fails_the_part():
    # catches: the tolerance loosened (a thousandfold looser, 1e-3, would pass this value)
    cases, results = recorded("sapo_loss")
    assert grader.judge_part("sapo_loss", list(zip(cases, results, strict=True)), []).earned == 20
    value = results[1]["outputs"]["value"]
    results[1]["outputs"]["value"] = value * (1 + 1e-5) + 1e-5
    verdict = grader.judge_part("sapo_loss", list(zip(cases, results, strict=True)), [])
    assert verdict.earned == 0 and "frozen case 2" in verdict.note


def test_a_part_wrong_only_in_its_last_frozen_case_fails():
    # catches: only the first frozen case of each part compared
    cases, results = recorded("sapo_gate")
    results[-1]["outputs"]["value"][0] += 0.5
    verdict = grader.judge_part("sapo_gate", list(zip(cases, results, strict=True)), [])
    assert verdict.earned == 0 and f"frozen case {len(cases)}" in verdict.note


def test_a_rounded_negative_zero_matches_the_digest_of_zero():
    # catches: "-0.0000" hashed as it prints (a correct -1e-9 would then fail a check whose answer is 0)
    from sapo_lab.course.answers import answer_digest, matches

    assert matches(-1e-9, answer_digest(0.0)) and matches([-4e-5, 1.0], answer_digest([0.0, 1.0]))
    assert not matches(-1e-3, answer_digest(0.0))


def test_the_issues_honest_mistakes_are_named_each_in_its_own_part(tmp_path):
    # catches: honest mistakes reported as "wrong at ...: got X, expected Y" with nothing named (the issue: 6 of 17),
    # r * A clipped misnamed "no clipping", the detach on the wrong tensor read as a plain detach problem, or a
    # Python float where a 0-d tensor belongs named as anything but that
    module = planted(tmp_path, {
        "mean = rewards.mean(dim=1, keepdim=True)\n    std = rewards.std(dim=1, unbiased=False, keepdim=True)":
            "mean = rewards.mean(dim=0, keepdim=True)\n    std = rewards.std(dim=0, unbiased=False, keepdim=True)",
        "torch.clamp(ratio, 1 - eps, 1 + eps) * adv": "torch.clamp(ratio * adv, 1 - eps, 1 + eps)",
        'return masked_mean(-adv * sapo_gate(ratio, tau), mask, "per_response")':
            'return masked_mean(-adv * sapo_gate(ratio, tau), torch.ones_like(mask), "per_response")',
        "((logp - behavior_logp.detach()) * m)": "((logp.detach() - behavior_logp) * m)",
        "return sapo_loss(logp, behavior_logp, advantages, mask, tau_pos, tau_neg)":
            "return float(sapo_loss(logp, behavior_logp, advantages, mask, tau_pos, tau_neg))",
    })
    report = grader.grade(str(module), seed=SEED)
    mistakes = {p.part: p.mistake for p in report.parts}
    assert mistakes["group_advantages"].startswith("statistics taken over the wrong axis"), report.lines()
    assert mistakes["clipped_surrogate_loss"] == "the product r * A clipped instead of the ratio r", report.lines()
    assert mistakes["sapo_loss"] == "the mask left out: padding tokens enter the mean", report.lines()
    assert mistakes["gspo_sequence_ratio"].startswith("the detach on the wrong tensor"), report.lines()
    assert report.part("update_loss").note.startswith("returns a float for the loss, not a 0-d tensor")
    assert [p.part for p in report.parts if p.earned == p.points] == ["masked_mean", "sapo_gate"], report.lines()


def test_every_catalogued_mistake_is_named_from_its_own_outputs():
    # catches: a mistake of the catalogue the grader names as another (a tie broken the wrong way, a score over
    # the wrong cases), or one whose outputs the grader's inputs cannot tell from the right answer without saying
    # so. A mistake's outputs on the frozen cases are handed to the verdict as the student's.
    from sapo_lab.course.mistakes import MISTAKES
    from sapo_lab.course.sandbox import observe_with_meta

    cases = grader.expected_outputs()
    indistinguishable = set()
    for part in grader.PARTS:
        for mistake in MISTAKES[part]:
            recorded = [observe_with_meta(part, mistake.compute, case["inputs"]) for case in cases[part]]
            results = [{"outputs": out, "meta": meta} for out, meta in recorded]
            verdict = grader.judge_part(part, list(zip(cases[part], results, strict=True)), [])
            if all(grader.close(out, case["expected"]) for (out, _), case in zip(recorded, cases[part], strict=True)):
                # within the value tolerance: told apart at float64's precision, and named, not called float32
                indistinguishable.add(mistake.name)
                assert verdict.mistake == mistake.name, (part, mistake.name, verdict.note)
            assert verdict.earned == 0 and verdict.mistake is not None, (part, mistake.name, verdict.note)
            named = next(m for m in MISTAKES[part] if m.name == verdict.mistake)
            same = [grader.close(out, grader.observe(part, named.compute, case["inputs"]))
                    for (out, _), case in zip(recorded, cases[part], strict=True)]
            assert all(same), (part, mistake.name, verdict.mistake)  # the same outputs, if not the same name
    # within the 1e-6 tolerance, eps inside the root moves no advantage of 0/1 rewards by more than 1e-6
    assert indistinguishable == {next(m.name for m in MISTAKES["group_advantages"] if "inside the square root"
                                      in m.name)}, indistinguishable


def test_a_result_of_a_wrong_shape_is_named_a_shape_however_large_or_deep(tmp_path):
    # catches: an honest wrong shape (a 4-d ratio, or a tensor of a million elements) sent as numbers the
    # message schema refuses, so the student reads "a message it does not accept" instead of the shape (both parts
    # are graded in one process)
    module = planted(tmp_path, {
        "return torch.exp(mean_log_ratio)": "return torch.exp(mean_log_ratio).reshape(-1, 1, 1, 1)",
        "return 4.0 / tau * torch.sigmoid(tau * (ratio - 1.0))":
            "return (4.0 / tau * torch.sigmoid(tau * (ratio - 1.0)))[:, None].expand(-1, 10_000)",
    })
    report = grader.grade(str(module), seed=SEED, parts=["sapo_gate", "gspo_sequence_ratio"])
    notes = {p.part: p.note for p in report.parts}
    assert notes["gspo_sequence_ratio"].startswith("wrong shape: returns ("), notes
    assert ", 1, 1, 1) for value, expected (" in notes["gspo_sequence_ratio"], notes
    assert notes["sapo_gate"].startswith("wrong shape: returns ("), notes
    assert ", 10000) for value" in notes["sapo_gate"], notes
