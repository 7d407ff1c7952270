"""The grader's verdicts, words and bounds, judged without starting a student process: each test builds the
recorded outputs (or the file, or the numbers) by hand, so every expected word and number is typed here, on
both sides of each documented bound and on it."""

from __future__ import annotations

import math

import pytest
import torch

from sapo_lab.course import grader

INF = float("inf")


def recorded(value, **grads) -> dict:
    """A call's result as the student's process reports it: outputs and the value's shape and dtype."""
    shape = [len(value)] if isinstance(value, list) else []
    return {"outputs": {"value": value, **grads}, "meta": {"value": {"shape": shape, "dtype": "float64"}}}


def frozen_case(expected: dict, inputs: dict | None = None) -> dict:
    return {"expected": expected, **({"inputs": inputs} if inputs is not None else {})}


# ---- close(): the documented bound |a - b| <= atol + rtol |b| ------------------------------------------------
def test_close_accepts_a_gap_exactly_on_its_bound_and_refuses_one_past_it():
    """catches: close() made strict (< instead of <=). atol 0.25 and rtol 0.5 at b = 2 put the bound at
    0.25 + 0.5 * 2 = 1.25, exact in binary, so a = 3.25 sits on it."""
    assert grader.close(3.25, 2.0, atol=0.25, rtol=0.5)
    assert grader.close(0.75, 2.0, atol=0.25, rtol=0.5)  # the same gap below b
    assert not grader.close(3.25 + 2**-40, 2.0, atol=0.25, rtol=0.5)


def test_close_tells_a_boolean_from_the_number_it_equals():
    """catches: booleans compared by value (True == 1.0), so a function returning True for 1.0 passes."""
    assert grader.close(True, True)
    assert not grader.close(True, 1.0)
    assert not grader.close(0.0, False)


def test_float64_agreement_is_1e_12_absolute_plus_1e_9_relative():
    """catches: ATOL_F64 and RTOL_F64 swapped (1e-9 absolute, 1e-12 relative). At b = 1000 a gap of 5e-7 is
    inside 1e-12 + 1e-9 * 1000 = 1.000000001e-6 and outside 1e-9 + 1e-12 * 1000 = 2e-9; at b = 0 a gap of
    5e-10 is outside 1e-12 and inside 1e-9."""
    assert grader.float64_close(1000.0 + 5e-7, 1000.0)
    assert not grader.float64_close(5e-10, 0.0)
    assert grader.float64_close(5e-13, 0.0)


# ---- the training part's threshold and its verdict line ----------------------------------------------------
def test_the_training_threshold_is_half_the_smallest_measured_gain_rounded_down():
    """catches: the threshold rounded up (0.15) or not halved. The smallest correct gain is 0.2803; half of it,
    0.14015, rounded down to two decimals is 0.14."""
    assert grader.TRAIN_MIN_GAIN == 0.14


@pytest.mark.parametrize(("gain", "earned", "word"), [
    (0.25, 15, "ok"),                           # exactly the required gain: "at least" passes
    (0.25 - 2**-20, 0, "below the required gain"),
    (0.375, 15, "ok"),
    (math.nan, 0, "below the required gain"),
])
def test_the_training_verdict_passes_a_gain_on_its_threshold_and_says_which_side(gain, earned, word):
    """catches: the gain compared with > instead of >= (a gain exactly on the threshold fails), or the two
    words of the note swapped."""
    result = grader.training_verdict(gain, 250, min_gain=0.25)
    assert (result.earned, result.points) == (earned, 15)
    assert result.note.startswith(f"{word}: Pass@1 gain ")
    assert result.note.endswith(" after 250 steps (required +0.25)")


def test_the_training_verdict_at_the_default_threshold():
    """catches: the default threshold moved off 0.14 in either direction (0.14 passes, 0.1399 does not)."""
    assert grader.training_verdict(0.14, None).earned == 15
    assert grader.training_verdict(0.1399, None).earned == 0
    assert grader.training_verdict(0.14, None).note == "ok: Pass@1 gain +0.140 (required +0.14)"


# ---- the report's lines -----------------------------------------------------------------------------------------
def test_a_report_line_shows_earned_before_points_and_the_total():
    """catches: earned and points swapped in a part's line or in the total, or a part with some points
    counted as passed."""
    report = grader.Report(parts=[grader.PartResult("sapo_gate", 10, 7, "wrong"),
                                  grader.PartResult("sapo_loss", 20, 20, "ok")])
    assert report.lines() == ["sapo_gate" + " " * 15 + "   7/10  wrong",
                              "sapo_loss" + " " * 15 + "  20/20  ok",
                              "total" + " " * 19 + "  27/30"]
    assert not report.passed
    assert grader.Report(parts=[grader.PartResult("sapo_loss", 20, 20, "ok")]).passed


def test_the_time_line_names_each_limit_with_its_own_flag():
    """catches: the per-call limit and the budget swapped in the report's line (distinct values: 7 and 300)."""
    assert grader.time_line(7, 300) == ("time limits: 7 s for each call (--time-limit), 300 s for all the "
                                        "module's calls together (--budget)")


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan])
def test_a_time_limit_that_is_not_a_positive_number_is_refused_in_one_line(value, capsys):
    """catches: --time-limit 0 (or --budget 0) accepted: the bound is "positive", so 0 is refused."""
    assert grader.run_grade("no_such_module.py", time_limit=value) == 2
    assert capsys.readouterr().err == f"error: --time-limit must be a positive number of seconds, got {value!r}\n"
    assert grader.run_grade("no_such_module.py", budget=value) == 2
    assert capsys.readouterr().err == f"error: --budget must be a positive number of seconds, got {value!r}\n"


# ---- what grade() refuses before it runs anything -----------------------------------------------------------
class Reached(Exception):
    """grade() got past its checks of the path and the seed."""


@pytest.fixture
def stops_after_the_checks(monkeypatch):
    def reached(seed):
        raise Reached(seed)
    monkeypatch.setattr(grader, "fresh_calls", reached)


@pytest.mark.parametrize(("seed", "accepted"), [(0, True), (2**63 - 1, True), (2**63, False), (-1, False)])
def test_the_seed_range_includes_both_ends(seed, accepted, tmp_path, stops_after_the_checks):
    """catches: the largest seed torch takes (2**63 - 1) refused (< instead of <=), or 0 refused."""
    module = tmp_path / "submission.py"
    module.write_text("")
    if accepted:
        with pytest.raises(Reached):
            grader.grade(str(module), seed=seed)
    else:
        with pytest.raises(grader.NotGradable, match=rf"^--seed must be an integer from 0 to {2**63 - 1}, got {seed}$"):
            grader.grade(str(module), seed=seed)


def test_a_module_of_exactly_the_size_cap_is_graded_and_one_byte_more_is_not(tmp_path, stops_after_the_checks):
    """catches: the size cap made strict (a 16 MiB module refused). Sparse files: nothing is written."""
    module = tmp_path / "submission.py"
    with open(module, "wb") as f:
        f.truncate(16 * 2**20)
    with pytest.raises(Reached):
        grader.grade(str(module), seed=1)
    with open(module, "wb") as f:
        f.truncate(16 * 2**20 + 1)
    with pytest.raises(grader.NotGradable, match=r"holds 16 MiB: a module's source is far smaller \(at most 16 MiB\)"):
        grader.grade(str(module), seed=1)


# ---- the verdict's words, from recorded outputs built here ---------------------------------------------------
def test_positional_places_keywords_after_the_positionals_in_the_skeletons_order():
    """catches: the keywords taken from one place too far (the first keyword after the positionals lost)."""
    kw = {"mask": "M", "advantages": "A", "tau_neg": 2.5, "tau_pos": 0.5}
    assert grader.positional("sapo_loss", ("L", "B"), kw) == ["L", "B", "A", "M", 0.5, 2.5]
    assert grader.positional("group_advantages", ("R",), {"eps": 0.1}) == ["R", 0.1]


@pytest.mark.parametrize(("error", "note"), [
    ("not implemented", "not implemented"),
    ("missing: define sapo_gate()", "missing: define sapo_gate()"),
    ("ValueError: boom", "ValueError: boom (frozen case 1)"),
])
def test_an_error_true_of_every_case_is_said_without_a_case(error, note):
    """catches: "not implemented" (or "missing:") labelled with the case it happened on, as if the other cases
    had passed; an error of one case keeps its label."""
    result = grader._judge_part("sapo_gate", [(frozen_case({"value": [1.0]}), {"error": error})], [])
    assert (result.earned, result.note) == (0, note)


@pytest.mark.parametrize(("meta", "expected", "words"), [
    ({"type": "int"}, [1.0, 2.0], "returns an int for value, not a tensor of shape (2,)"),
    ({"type": "float"}, 1.5, "returns a float for the loss, not a 0-d tensor"),
    ({"shape": [1], "dtype": "float64"}, 1.5,
     "wrong shape: returns (1,) for the loss, expected () (a 0-d tensor: no keepdim, no [None])"),
    ({"shape": [3], "dtype": "float64"}, [1.0, 2.0], "wrong shape: returns (3,) for value, expected (2,)"),
    ({"shape": [2], "dtype": "float32"}, [1.0, 2.0],
     "wrong dtype: returns float32 for float64 inputs (compute in the inputs' dtype)"),
])
def test_a_returned_value_of_the_wrong_kind_shape_or_dtype_is_said_in_words(meta, expected, words):
    """catches: the article inverted ("a int"), the 0-d hint given to a vector (or withheld from a scalar), or
    a float32 result accepted as the inputs' dtype."""
    assert grader._form_problem({"value": expected}, {"value": expected}, {"value": meta}) == words


@pytest.mark.parametrize(("part", "hint"), [
    ("sapo_gate", "; these inputs hold ratios up to e^7.5: does something overflow, e.g. exp(x) / (1 + exp(x))?"),
    ("update_loss", "; these inputs hold ratios up to e^7.5: does something overflow, e.g. exp(x) / (1 + exp(x))?"),
    ("group_advantages", "; a division by zero?"),
    ("gspo_sequence_ratio", "; these responses hold up to 1000 tokens, whose product of ratios overflows: average "
                            "the log-ratios, then take exp"),
])
def test_an_infinite_output_gets_the_hint_of_its_part(part, hint):
    """catches: a ratio part left out of RATIO_PARTS (the gate told of a division by zero), or GSPO's
    long-response hint given to another part."""
    expected = {"value": [1.0, 2.0]}
    got = recorded([INF, 2.0])
    result = grader._judge_part(part, [(frozen_case(expected), got)], [])
    assert result.note == f"inf at value[0] where the reference is 1 (frozen case 1){hint}"


def gate_outputs(fn, ratio, tau):
    return grader.observe_with_meta("sapo_gate", fn, {"ratio": ratio, "tau": tau})


def test_a_mistake_matching_some_failing_cases_says_how_many_and_one_matching_none_is_not_named():
    """catches: the "matches N of M" share printed with its numbers swapped, and a mistake that matches no
    failing case named anyway (a score of 0 taken as a match)."""
    from sapo_lab.objective.gates import soft_gate

    def half_gate(ratio, tau):  # the catalogue's "2 / tau instead of 4 / tau", written out here
        return 2 / tau * torch.sigmoid(tau * (ratio - 1))

    def nonsense(ratio, tau):
        return ratio * 0 + 7.0

    cases = [([0.5, 1.0, 2.0], 1.5), ([0.25, 3.0], 0.5)]
    inputs = [{"ratio": r, "tau": t} for r, t in cases]
    want = [gate_outputs(lambda ratio, tau: soft_gate(ratio, tau), r, t)[0] for r, t in cases]

    def results(*fns):
        out = []
        for fn, (r, t) in zip(fns, cases, strict=True):
            outputs, meta = gate_outputs(fn, r, t)
            out.append({"outputs": outputs, "meta": meta})
        return out

    mixed = grader._judge_part("sapo_gate", [(frozen_case(w, i), res) for w, i, res in
                                             zip(want, inputs, results(half_gate, nonsense), strict=True)], [])
    assert mixed.note.startswith("wrong; most likely mistake: 2 / tau instead of 4 / tau (matches 1 of 2 failing "
                                 "cases); fix: ")
    unnamed = grader._judge_part("sapo_gate", [(frozen_case(w, i), res) for w, i, res in
                                               zip(want, inputs, results(nonsense, nonsense), strict=True)], [])
    assert "most likely mistake" not in unnamed.note
    assert unnamed.mistake is None


def test_a_part_failing_only_on_its_defaults_says_the_skeletons_defaults():
    """catches: the defaults printed unformatted (tau_pos=1.0) or the call on defaults not found (the first
    fresh setting is the one that leaves the arguments out)."""
    right, wrong = recorded(1.5), recorded(2.5)
    expected = {"value": 1.5}
    fresh = [(expected, wrong), (expected, right), (expected, right)]
    result = grader.judge_part("sapo_loss", [(frozen_case(expected), right)], fresh)
    assert result.note.endswith("; it fails only on the call that leaves these arguments to your function's "
                                "defaults: are they the skeleton's (tau_pos=1, tau_neg=1.05)?")
    moved = [(expected, right), (expected, wrong), (expected, right)]
    assert "defaults" not in grader.judge_part("sapo_loss", [(frozen_case(expected), right)], moved).note


def test_the_fresh_settings_move_each_argument_off_its_default_and_apart():
    """catches: a fresh setting with tau_pos equal to tau_neg (a swap of the two cannot show) or one left at
    the handout's default (eps 0.2, advantage eps 1e-6, tau_pos 1, tau_neg 1.05), typed here."""
    first, *moved = grader.FRESH_SETTINGS
    assert first == {}
    defaults = {"eps": 0.2, "advantage_eps": 1e-6, "tau_pos": 1.0, "tau_neg": 1.05}
    for settings in moved:
        assert set(settings) == set(defaults)
        assert all(settings[k] != defaults[k] for k in defaults), settings
        assert settings["tau_pos"] != settings["tau_neg"]
    assert len({tuple(sorted(s.items())) for s in moved}) == len(moved)


# ---- the training part's check of the student's loss against the handout ------------------------------------
def student_loss_checker() -> grader.StudentLoss:
    checker = grader.StudentLoss.__new__(grader.StudentLoss)
    checker.close = lambda hung=False: None
    return checker


def test_the_trainer_batch_check_holds_the_loss_to_a_relative_1e_3():
    """catches: TRAIN_CHECK_RTOL loosened (or tightened) tenfold. On-policy (logp = behavior_logp, r = 1) with
    A = 1 and tau_pos = 0.5, the loss is -A (4 / tau) sigmoid(0) = -4 and its gradient in logp is
    -A (4 / tau) tau sigmoid'(0) r = -4 * 0.25 = -1 on the one token."""
    logp = torch.zeros(1, 1)
    sent = [logp, torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1)]
    grad = torch.full((1, 1), -1.0)
    checker = student_loss_checker()
    checker._check_against_handout(sent, -4.0 * (1 + 5e-4), grad, 0.5, 2.0)  # inside 1e-3
    with pytest.raises(grader.StudentLossError, match="returns -4.02 where the handout's definition gives -4"):
        checker._check_against_handout(sent, -4.0 * (1 + 5e-3), grad, 0.5, 2.0)
    with pytest.raises(grader.StudentLossError, match="gradient of your sapo_loss"):
        checker._check_against_handout(sent, -4.0, grad * (1 + 5e-3), 0.5, 2.0)
