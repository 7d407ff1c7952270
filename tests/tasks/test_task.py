import pytest

from sapo_lab.tasks import REASONS, make_problem, make_splits, verify


def test_problem_format():
    p = make_problem(47, 385, 3)
    assert p.prompt == "047+385=" and p.answer == "2340" and p.difficulty == 2  # 7+5 and 4+8+1 carry
    assert make_problem(99, 99, 2).answer == "891" and make_problem(99, 99, 2).difficulty == 2  # 198 reversed
    assert make_problem(12, 30, 2).difficulty == 0 and make_problem(5, 5, 2).difficulty == 1
    with pytest.raises(ValueError):
        make_problem(100, 1, 2)


def test_splits_frozen_disjoint_and_balanced():
    a = make_splits(seed=0, max_digits=2, num_train=500, num_dev=50, num_eval=50)
    b = make_splits(seed=0, max_digits=2, num_train=500, num_dev=50, num_eval=50)
    assert a == b
    prompts = {k: {p.prompt for p in v} for k, v in a.items()}
    assert not (prompts["train"] & prompts["dev"]) and not (prompts["train"] & prompts["eval"])
    assert not (prompts["dev"] & prompts["eval"])
    assert len(prompts["train"]) == 500
    # the untouched evaluation split does not depend on how much training data is drawn
    c = make_splits(seed=0, max_digits=2, num_train=900, num_dev=50, num_eval=50)
    assert c["eval"] == a["eval"] and c["dev"] == a["dev"]
    assert make_splits(seed=1, max_digits=2, num_train=500, num_dev=50, num_eval=50)["eval"] != a["eval"]


def test_split_arguments_are_checked():
    with pytest.raises(ValueError, match="distinct pairs"):
        make_splits(max_digits=1, num_train=200, num_dev=1, num_eval=1)
    with pytest.raises(ValueError, match="min_digits"):
        make_splits(min_digits=3, max_digits=2)
    with pytest.raises(ValueError, match="num_dev"):
        make_splits(num_dev=0)


@pytest.mark.parametrize(
    "text,finished,expected",
    [
        ("2340", True, (1.0, "correct")),
        (" 2340 ", True, (1.0, "correct")),  # surrounding whitespace is stripped
        ("2340", False, (0.0, "truncated")),  # no EOS within the limit, even if the digits are right
        ("234", True, (0.0, "wrong")),  # numerically equal (432) but not the declared width
        ("2341", True, (0.0, "wrong")),
        ("", True, (0.0, "invalid")),
        ("23+0", True, (0.0, "invalid")),
        ("23<unk>0", True, (0.0, "invalid")),
        ("２340", True, (0.0, "invalid")),  # non-ASCII digit
    ],
)
def test_verifier_rules(text, finished, expected):
    reward, reason = verify(text, finished, make_problem(47, 385, 3))
    assert (reward, reason) == expected and reason in REASONS
