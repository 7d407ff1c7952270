"""The task suite: answers and difficulties checked against independent computations."""

import json
import random
import re
from collections import Counter

import pytest

from sapo_lab.tasks import AdditionTask, Problem, family_of
from sapo_lab.tasks.suite import (
    FAMILIES,
    REASONS,
    SUITE_TASKS,
    CarryDroppedColdStart,
    DigitSort,
    MixedSuite,
    Reversal,
    ScratchpadAddition,
    Subtraction,
    allocate,
)

ALL = {**SUITE_TASKS, "addition": AdditionTask}
SIZES = dict(num_train=300, num_dev=40, num_eval=60)


def _operands(prompt):
    return [int(x) for x in re.findall(r"[0-9]+", prompt)]


def independent_answer(name, prompt):
    """The answer recomputed from the prompt alone, by another route than the task's code."""
    if name == "addition":
        a, b = _operands(prompt)
        width = len(prompt.split("+")[0])
        return "".join(reversed(f"{a + b:0{width + 1}d}"))
    if name == "subtraction":
        a, b = _operands(prompt)
        width = len(prompt.split("-")[0])
        return "".join(reversed(f"{a - b:0{width}d}"))
    if name == "sorting":
        return "".join(str(d) for d in range(10) for _ in range(prompt.count(str(d))))
    if name == "reversal":
        body = prompt[1:-1]
        return "".join(body[len(body) - 1 - i] for i in range(len(body)))
    raise KeyError(name)


def independent_difficulty(name, prompt):
    """Carries / borrows from the modular characterisation, lengths by counting digits."""
    if name in ("addition", "scratchpad_addition"):
        a, b = _operands(prompt)
        # a carry leaves column i exactly when the low i+1 digits overflow
        return sum((a % 10 ** (i + 1)) + (b % 10 ** (i + 1)) >= 10 ** (i + 1) for i in range(12))
    if name == "subtraction":
        a, b = _operands(prompt)
        return sum((a % 10 ** (i + 1)) < (b % 10 ** (i + 1)) for i in range(12))
    return sum(ch.isdigit() for ch in prompt)


@pytest.mark.parametrize("name", sorted(n for n in ALL if n not in ("suite", "scratchpad_addition", "addition_carry_dropped")))
def test_answers_and_difficulty_match_independent_computation(name):
    task = ALL[name]()
    for split in task.make_splits(0, **SIZES).values():
        for p in split:
            assert p.answer == independent_answer(name, p.prompt), p
            assert p.difficulty == independent_difficulty(name, p.prompt), p
            assert task.verify(p.answer, True, p) == (1.0, "correct")


def test_subtraction_examples():
    t = Subtraction(max_digits=3)
    assert t.problem(385, 47) == Problem("385-047=", "833", 1)  # 5-7 borrows; 8-1-4, 3-0 do not
    assert t.problem(47, 385) == t.problem(385, 47)  # larger operand first
    assert t.problem(100, 1) == Problem("100-001=", "990", 2) and t.problem(5, 5).answer == "000"
    with pytest.raises(ValueError):
        t.problem(1000, 1)


def test_scratchpad_trace_is_column_arithmetic():
    t = ScratchpadAddition()
    p = t.problem(47, 385)
    assert p == Problem("047+385:", "75012,48113,03104=2340", 2)
    for split in t.make_splits(3, **SIZES).values():
        for p in split:
            a, b = _operands(p.prompt)
            trace, answer = p.answer.split("=")
            assert int(answer[::-1]) == a + b and len(answer) == 4
            carry = 0
            for i, g in enumerate(trace.split(",")):
                da, db, cin, total = int(g[0]), int(g[1]), int(g[2]), int(g[3:])
                assert (da, db) == (a // 10**i % 10, b // 10**i % 10) and cin == carry
                assert total == da + db + cin and answer[i] == g[4]
                carry = total // 10
            assert p.difficulty == independent_difficulty("scratchpad_addition", p.prompt)


def test_long_output_family_fits_the_cpu_models():
    from sapo_lab.training.model import MODEL_SIZES

    t = ScratchpadAddition()
    lengths = {len(p.answer) for s in t.make_splits(0, **SIZES).values() for p in s}
    assert lengths == {t.max_answer_length} and t.max_answer_length >= 20
    prompt_len = max(len(p.prompt) for p in t.make_splits(0, **SIZES)["eval"])
    assert prompt_len + t.max_answer_length + 1 <= MODEL_SIZES["cpu-tiny"]["n_positions"]  # + EOS


@pytest.mark.parametrize("name", sorted(ALL))
def test_splits_frozen_disjoint_and_eval_independent_of_num_train(name):
    task = ALL[name]()
    a = task.make_splits(0, **SIZES)
    assert a == ALL[name]().make_splits(0, **SIZES)  # a pure function of the arguments
    assert {k: len(v) for k, v in a.items()} == {"train": 300, "dev": 40, "eval": 60}
    prompts = {k: [p.prompt for p in v] for k, v in a.items()}
    all_prompts = sum(prompts.values(), [])
    assert len(set(all_prompts)) == len(all_prompts)  # disjoint, and no repeats within a split
    bigger = task.make_splits(0, num_train=700, num_dev=40, num_eval=60)
    assert bigger["eval"] == a["eval"] and bigger["dev"] == a["dev"]
    assert task.make_splits(1, **SIZES)["eval"] != a["eval"]
    assert all(set(p.prompt + p.answer) <= set(task.alphabet) for s in a.values() for p in s)


@pytest.mark.parametrize("name", ["sorting", "reversal"])
def test_length_levels_are_equally_represented(name):
    task = ALL[name](min_length=4, max_length=7)
    counts = Counter(p.difficulty for p in task.make_splits(0, num_train=4000, num_dev=1, num_eval=1)["train"])
    assert set(counts) == {4, 5, 6, 7} and min(counts.values()) > 0.8 * max(counts.values())
    with pytest.raises(ValueError, match="raise min_length"):
        ALL[name](min_length=1, max_length=2).make_splits(0, num_train=100, num_dev=1, num_eval=1)


@pytest.mark.parametrize(
    "name,text,finished,expected",
    [
        ("subtraction", "833", True, (1.0, "correct")),
        ("subtraction", " 833 ", True, (1.0, "correct")),
        ("subtraction", "833", False, (0.0, "truncated")),
        ("subtraction", "83", True, (0.0, "wrong")),  # 338 is 3 digits: the width is part of the format
        ("subtraction", "338", True, (0.0, "wrong")),  # not reversed
        ("subtraction", "-833", True, (0.0, "invalid")),
        ("subtraction", "", True, (0.0, "invalid")),
        ("sorting", "12349", True, (1.0, "correct")),
        ("sorting", "1234", True, (0.0, "wrong")),  # a digit dropped
        ("sorting", "94321", True, (0.0, "wrong")),  # descending
        ("sorting", "１2349", True, (0.0, "invalid")),  # non-ASCII digit
        ("reversal", "24139", True, (1.0, "correct")),
        ("reversal", "93142", True, (0.0, "wrong")),  # copied, not reversed
        ("reversal", "2413 9", True, (0.0, "invalid")),
        ("scratchpad_addition", "75012,48113,03104=2340", True, (1.0, "correct")),
        ("scratchpad_addition", "75012,48113,03104=2341", True, (0.0, "wrong")),
        ("scratchpad_addition", "75012,48113,03114=2340", True, (0.0, "wrong_trace")),
        ("scratchpad_addition", "=2340", True, (0.0, "wrong_trace")),  # skipping the work is not paid
        ("scratchpad_addition", "75012,48113,03104", True, (0.0, "invalid")),  # no final answer
        ("scratchpad_addition", "75012,48113,03104=2340=", True, (0.0, "invalid")),
        ("scratchpad_addition", "75012,48113,03104=2340", False, (0.0, "truncated")),
    ],
)
def test_verifier_rules(name, text, finished, expected):
    problems = {
        "subtraction": Subtraction(max_digits=3).problem(385, 47),
        "sorting": DigitSort().problem("93142"),
        "reversal": Reversal().problem("93142"),
        "scratchpad_addition": ScratchpadAddition().problem(47, 385),
    }
    reward, reason = ALL[name]().verify(text, finished, problems[name])
    assert (reward, reason) == expected and reason in REASONS
    assert (reason == "correct") == (reward == 1.0)


def test_answer_only_verifier_lets_the_shortcut_through():
    p = ScratchpadAddition().problem(47, 385)
    hackable = ScratchpadAddition(check_trace=False)
    assert hackable.verify("=2340", True, p) == (1.0, "correct")  # the documented reward hack
    assert hackable.verify("=2341", True, p) == (0.0, "wrong")


def test_allocate_is_proportional_and_exact():
    assert allocate(10, {"a": 1, "b": 1, "c": 3}) == {"a": 2, "b": 2, "c": 6}
    assert allocate(7, {"a": 1, "b": 1}) == {"a": 4, "b": 3}  # the tie goes to the first listed
    rng = random.Random(0)
    for _ in range(200):
        w = {k: rng.random() for k in "abcd"}
        n = rng.randrange(1, 500)
        got = allocate(n, w)
        assert sum(got.values()) == n
        assert all(abs(got[k] - n * w[k] / sum(w.values())) < 1 for k in w)


def test_mixed_suite_weights_families_and_breakdown():
    suite = MixedSuite(
        families={"addition": {"max_digits": 3}, "sorting": {}, "scratchpad_addition": {}},
        weights={"addition": 2, "sorting": 1, "scratchpad_addition": 1},
    )
    splits = suite.make_splits(0, num_train=400, num_dev=40, num_eval=80)
    for name, n in (("train", 400), ("dev", 40), ("eval", 80)):
        fams = Counter(suite.family_of(p) for p in splits[name])
        assert fams == allocate(n, suite.weights)  # the declared weighting, not uniform
    # each family's part is that family's own split from the derived seed: verifiers and answers agree
    for p in splits["eval"]:
        fam = suite.family_of(p)
        assert suite.verify(p.answer, True, p) == (1.0, "correct")
        if fam != "scratchpad_addition":
            assert p.answer == independent_answer(fam, p.prompt)
    assert set(suite.alphabet) == set("0123456789+=s:,") and len(suite.alphabet) == len(set(suite.alphabet))
    assert suite.max_answer_length == 22
    bigger = suite.make_splits(0, num_train=900, num_dev=40, num_eval=80)
    assert bigger["eval"] == splits["eval"] and bigger["dev"] == splits["dev"]
    prompts = [p.prompt for s in splits.values() for p in s]
    assert len(set(prompts)) == len(prompts)
    assert [suite.family_of(p) for p in splits["eval"][:20]] != sorted(suite.family_of(p) for p in splits["eval"][:20])


def test_mixed_suite_rejects_bad_declarations():
    with pytest.raises(ValueError, match="unknown task family"):
        MixedSuite(families={"multiplication": {}})
    with pytest.raises(ValueError, match="weights must name exactly"):
        MixedSuite(families={"addition": {}, "sorting": {}}, weights={"addition": 1})
    with pytest.raises(ValueError, match="non-negative"):
        MixedSuite(families={"addition": {}}, weights={"addition": -1})
    with pytest.raises(ValueError, match="gets no"):
        MixedSuite().make_splits(0, num_train=100, num_dev=2, num_eval=10)
    with pytest.raises(ValueError, match="belongs to no family"):
        MixedSuite(families={"sorting": {}}).family_of(Problem("1+1=", "20", 0))


def test_family_of_plain_task_and_options_are_json():
    import inspect

    assert family_of(Subtraction(), Subtraction().problem(3, 1)) == "subtraction"
    for cls in ALL.values():
        params = inspect.signature(cls).parameters.values()
        assert all(p.default is not inspect.Parameter.empty for p in params), cls  # every option defaulted
        options = json.loads(json.dumps({p.name: p.default for p in params}))  # and JSON-serialisable
        assert cls(**options).make_splits(2, 30, 5, 5) == cls().make_splits(2, 30, 5, 5)


def test_every_family_prompt_format_is_distinct():
    """A prompt of one family never matches another family's pattern (so the mix can tell them apart)."""
    tasks = {n: c() for n, c in FAMILIES.items()}
    for name, t in tasks.items():
        for p in t.make_splits(0, num_train=50, num_dev=5, num_eval=5)["train"]:
            owners = [n for n, other in tasks.items() if other.prompt_pattern.fullmatch(p.prompt)]
            assert owners == [name], p.prompt


def test_carry_dropped_cold_start_corrupts_only_training_labels():
    t = CarryDroppedColdStart(max_digits=2, corrupt_fraction=0.5)
    got = t.make_splits(0, num_train=2000, num_dev=40, num_eval=60)
    clean = AdditionTask(max_digits=2).make_splits(0, num_train=2000, num_dev=40, num_eval=60)
    assert got["eval"] == clean["eval"] and got["dev"] == clean["dev"]  # held-out splits are untouched
    corrupted = carrying = 0
    for p, q in zip(got["train"], clean["train"], strict=True):
        assert (p.prompt, p.difficulty) == (q.prompt, q.difficulty)
        a, b = _operands(p.prompt)
        pairs = zip(f"{a:02d}"[::-1], f"{b:02d}"[::-1], strict=True)
        no_carry = "".join(str((int(x) + int(y)) % 10) for x, y in pairs) + "0"
        if p.answer != q.answer:
            assert p.answer == no_carry and p.difficulty > 0  # the one declared error, only where it is an error
            corrupted += 1
        carrying += p.difficulty > 0
    assert abs(corrupted / carrying - 0.5) < 0.06
    p = next(p for p, q in zip(got["train"], clean["train"], strict=True) if p.answer != q.answer)
    truth = independent_answer("addition", p.prompt)
    assert t.verify(truth, True, p) == (1.0, "correct")  # the verifier ignores the corrupted label
    assert t.verify(p.answer, True, p) == (0.0, "carry_dropped")
    assert t.verify("999", True, p) == (0.0, "wrong") and t.verify(truth, False, p) == (0.0, "truncated")
    no_carry_problem = next(p for p in got["train"] if p.difficulty == 0)
    assert t.verify(no_carry_problem.answer, True, no_carry_problem) == (1.0, "correct")
    plain = AdditionTask().make_splits(0, 300, 10, 10)
    assert CarryDroppedColdStart(corrupt_fraction=0.0).make_splits(0, 300, 10, 10) == plain
