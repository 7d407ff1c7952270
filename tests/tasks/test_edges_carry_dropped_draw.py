"""Which training labels the carry-dropped cold start corrupts: the seeded draw, made for carrying problems only."""
import random

from sapo_lab.tasks.addition import AdditionTask
from sapo_lab.tasks.suite import CarryDroppedColdStart


def test_the_draw_is_made_once_per_carrying_problem_in_split_order():
    """Catches a draw spent on carry-free problems too (``difficulty >= 0``): their labels stay right, but every
    later carrying problem then gets another coin, so the same seed corrupts other labels than the committed
    studies trained on. Expected: a plain re-implementation of the declared draw."""
    seed, fraction = 3, 0.4
    clean = AdditionTask(max_digits=2).make_splits(seed, num_train=400, num_dev=20, num_eval=20)["train"]
    rng = random.Random(f"sapo-lab-carry-dropped-{seed}")
    expected = [p.difficulty > 0 and rng.random() < fraction for p in clean]
    got = CarryDroppedColdStart(max_digits=2, corrupt_fraction=fraction).make_splits(
        seed, num_train=400, num_dev=20, num_eval=20)["train"]
    corrupted = [p.answer != q.answer for p, q in zip(got, clean, strict=True)]
    assert corrupted == expected
    assert 0 < sum(expected) < sum(p.difficulty > 0 for p in clean)  # both kinds of carrying problem present
