"""The grader at the edges an outside attacker found: a call's time limit that the module's own messages cannot
restart, the gradients the gate and the masked mean pass on (values alone let a detached gate score full marks
while its losses could not train), and the arguments a call leaves to the module's defaults or moves off them.
Each module here is the handout's with one planted change; each test names the mistake it catches.
"""

from __future__ import annotations

from pathlib import Path

from sapo_lab.course import grader
from sapo_lab.course.reference import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
HANDOUT = ROOT / "tests" / "course" / "assignment_modules" / "from_handout.py"
SEED = 20261206


def planted(tmp_path, old: str, new: str, prefix: str = "") -> Path:
    text = HANDOUT.read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "submission.py"
    path.write_text(prefix + text.replace(old, new))
    return path


RESTARTS_ITS_CLOCK = '''
import json as _json, os as _os, sys as _sys, time as _time
_FD = int(_sys.argv[1])  # the harness's event pipe, whose number the harness is started with
_first = [True]


def _slow_gate(ratio, tau):
    if _first[0]:  # the first call runs three times the limit, saying "start" again every 0.3 s
        _first[0] = False
        for _ in range(20):
            _os.write(_FD, (_json.dumps({"event": "start", "key": "sapo_gate/frozen/0"}) + "\\n").encode())
            _time.sleep(0.3)
    return _right_gate(ratio, tau)
'''


def test_a_call_past_its_time_limit_fails_even_when_the_module_restarts_the_clock(tmp_path):
    # catches: the per-call clock restarted by any message from the student's process (a repeated "start"),
    # which let a call run past --time-limit and still score (85/85, exit 0 in the trial)
    module = planted(tmp_path, "def sapo_gate(ratio, tau):", "def _right_gate(ratio, tau):", RESTARTS_ITS_CLOCK)
    module.write_text(module.read_text() + "\nsapo_gate = _slow_gate\n")
    report = grader.grade(str(module), seed=SEED, parts=["sapo_gate"], time_limit=2.0)
    gate = report.part("sapo_gate")
    assert gate.earned == 0 and "exceeded the time limit (2 s)" in gate.note, gate.note


def test_a_gate_that_detaches_the_ratio_fails_its_part(tmp_path):
    # catches: the gate graded on values alone: with ratio.detach() inside it the values are right, the losses
    # built on it cannot train, and the composite parts (graded with the stand-in gate) all pass
    module = planted(tmp_path, "return 4.0 / tau * torch.sigmoid(tau * (ratio - 1.0))",
                     "return 4.0 / tau * torch.sigmoid(tau * (ratio.detach() - 1.0))")
    report = grader.grade(str(module), seed=SEED, parts=["sapo_gate", "sapo_loss"])
    gate = report.part("sapo_gate")
    assert gate.earned == 0 and gate.note.startswith("no gradient with respect to ratio"), gate.note
    assert report.part("sapo_loss").earned == report.part("sapo_loss").points  # one bug, one part


def test_a_masked_mean_that_detaches_one_aggregation_fails_its_part(tmp_path):
    # catches: the masked mean graded on values alone (a token_pool branch built with .detach())
    module = planted(tmp_path, "return (values * m).sum() / m.sum()", "return (values.detach() * m).sum() / m.sum()")
    report = grader.grade(str(module), seed=SEED, parts=["masked_mean"])
    part = report.part("masked_mean")
    assert part.earned == 0 and "gradient of token_pool with respect to values" in part.note, part.note


def test_the_first_fresh_case_runs_the_modules_own_defaults(tmp_path):
    # catches: every call passing eps, tau_pos and tau_neg explicitly, so that a signature whose defaults are
    # swapped (tau_pos=1.05, tau_neg=1.0) scores full marks
    assert grader.FRESH_SETTINGS[0] == {} and DEFAULTS["sapo_loss"] == {"tau_pos": 1.0, "tau_neg": 1.05}
    module = planted(tmp_path, "def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05):",
                     "def sapo_loss(logp, behavior_logp, advantages, mask, tau_pos=1.05, tau_neg=1.0):")
    report = grader.grade(str(module), seed=SEED, parts=["sapo_loss"])
    part = report.part("sapo_loss")
    assert part.earned == 0 and "leaves these arguments to your function's defaults" in part.note, part.note


def test_a_clip_range_that_ignores_eps_fails_on_the_cases_that_move_it(tmp_path):
    # catches: every case clipping at the default 0.2, so that a loss with 0.8/1.2 written in scores full marks
    assert sorted(s.get("eps", 0.2) for s in grader.FRESH_SETTINGS) == [0.1, 0.2, 0.3]
    module = planted(tmp_path, "torch.clamp(ratio, 1 - eps, 1 + eps)", "torch.clamp(ratio, 0.8, 1.2)")
    report = grader.grade(str(module), seed=SEED, parts=["clipped_surrogate_loss"])
    part = report.part("clipped_surrogate_loss")
    assert part.earned == 0, part.note


def test_a_function_that_changes_its_input_in_place_fails_its_part(tmp_path):
    # catches: inputs cloned for each call and never looked at again, so that a group_advantages that normalises
    # the caller's reward table in place (which a trainer would then log and reuse) scores full marks
    module = planted(tmp_path, "    mean = rewards.mean(dim=1, keepdim=True)\n",
                     "    rewards -= rewards.mean(dim=1, keepdim=True)  # centred in place: the values stay right\n"
                     "    mean = 0.0\n")
    report = grader.grade(str(module), seed=SEED, parts=["group_advantages"])
    part = report.part("group_advantages")
    assert part.earned == 0 and "changes its input rewards in place" in part.note, part.note


def test_a_gspo_ratio_taken_as_a_product_of_token_ratios_fails_on_long_responses(tmp_path):
    # catches: GSPO graded on responses of at most 7 tokens, where prod(r_t)^(1/T) equals exp(mean log r_t);
    # on 1000-token responses whose log-ratios sum to about +-800 the product is inf (or 0) in float64
    module = planted(tmp_path, "def gspo_sequence_ratio(logp, behavior_logp, mask):",
                     "def gspo_sequence_ratio(logp, behavior_logp, mask):\n"
                     "    r = torch.exp(logp - behavior_logp.detach())\n"
                     "    m = mask.to(logp.dtype)\n"
                     "    return torch.prod(torch.where(m > 0, r, torch.ones_like(r)), dim=-1) ** (1.0 / m.sum(-1))\n"
                     "\n\ndef _unused(logp, behavior_logp, mask):")
    report = grader.grade(str(module), seed=SEED, parts=["gspo_sequence_ratio"])
    part = report.part("gspo_sequence_ratio")
    assert part.earned == 0 and "(fresh case 4)" in part.note and "average the log-ratios" in part.note, part.note


def test_group_advantages_is_called_with_other_eps_values(tmp_path):
    # catches: group_advantages only ever called with rewards, so that one which ignores its eps (1e-6 written
    # in) scores full marks; eps = 0.1 moves a 0/1 group's advantages by about 20%
    assert sorted(s.get("advantage_eps", 1e-6) for s in grader.FRESH_SETTINGS) == [1e-6, 1e-3, 0.1]
    module = planted(tmp_path, "    return (rewards - mean) / (std + eps)", "    return (rewards - mean) / (std + 1e-6)")
    report = grader.grade(str(module), seed=SEED, parts=["group_advantages"])
    part = report.part("group_advantages")
    assert part.earned == 0 and "(fresh case 2)" in part.note, part.note


def test_a_masked_mean_whose_default_aggregation_is_token_pool_fails_its_part(tmp_path):
    # catches: masked_mean always called with its aggregation, so a swapped default scores full marks
    module = planted(tmp_path, 'def masked_mean(values, mask, aggregation="per_response"):',
                     'def masked_mean(values, mask, aggregation="token_pool"):')
    report = grader.grade(str(module), seed=SEED, parts=["masked_mean"])
    part = report.part("masked_mean")
    assert part.earned == 0 and "keep the skeleton's default aggregation" in part.note, part.note


def test_the_students_text_cannot_line_up_a_total_column():
    # catches: runs of spaces kept in the student's error text, which lined up "total   85/85" inside a
    # failing part's line so that a script's unanchored search read it as the total
    from sapo_lab.course.student_messages import one_line

    assert one_line("ValueError: ok   total                     85/85") == "ValueError: ok total 85/85"
