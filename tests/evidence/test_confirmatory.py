"""The generated sentences about the confirmatory studies: their numbers, the README's copy, the clip bound."""

import itertools
import json
import random
from pathlib import Path

import pytest

from sapo_lab.evidence.analysis import primary_results
from sapo_lab.evidence.confirmatory import (
    answer_sentences,
    clipped_at_least,
    confirmatory_results,
    headline_sentence,
    interval_text,
    mechanism_reading,
)
from sapo_lab.evidence.results import load_study

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    return confirmatory_results()


def test_readme_states_the_generated_headline(results):
    # fails when a rerun changes a confirmatory number and the README still quotes the old one
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert headline_sentence(results) in readme


def test_answer_quotes_each_declared_test_once(results):
    # recomputed from primary_results directly: fails if the sentence quoted another test's interval
    by_id = {r["id"]: r for name in ("confirm_addition", "confirm_scratchpad") for r in primary_results(load_study(name))}
    text = answer_sentences(results)
    for qid in ("Q1", "Q2", "Q4"):
        assert text.count(interval_text(by_id[qid]["comparison"])) == 1, qid
    for qid in ("Q3a", "Q3b", "Q3c"):
        assert interval_text(by_id[qid]["comparison"]) not in text, qid


def test_interval_text_uses_true_minus_signs():
    class C:
        mean, t_interval = -0.0751, (-0.1237, 0.0261)

    assert interval_text(C) == "\u22120.075 [\u22120.124, +0.026]"


def test_mechanism_shares_split_q1(results):
    m = mechanism_reading(results)
    assert m.identity_error < 1e-12  # per seed Q1 = Q3a + Q3b: fails if a side were swapped
    assert abs(m.share_smoothness + m.share_suppression - 1) < 1e-12
    assert set(m.survivors) <= set(m.raw_below_alpha)  # Holm never rejects what the raw test keeps


def test_headline_and_answer_name_the_m_and_rate_their_runs_trained_at(results):
    # read from config.json directly: fails if a sentence claimed stale minibatches in general, or a rate or M
    # its runs did not have
    def trained(study):
        (first, *_) = sorted((ROOT / "results" / study / "runs").iterdir())
        opt = json.loads((first / "config.json").read_text())["optimization"]
        return opt["steps_per_generation"], opt["learning_rate"]

    (m1, lr1), (m2, lr2) = trained("confirm_addition"), trained("confirm_scratchpad")
    assert lr1 == lr2 == 2e-4
    head, answer = headline_sentence(results), answer_sentences(results)
    assert f"two-digit addition at M = {m1} (" in head and f"scratchpad addition at M = {m2} (" in head
    assert "(2e-4, shared)" in head and "shared (2e-4)" in answer
    assert f"($M={m1}$)" in answer and f"($M={m2}$)" in answer and "not about other staleness" in answer


def test_answer_refuses_a_pending_test(results):
    partial = {k: v for k, v in results.items() if k != "Q4"}
    with pytest.raises(ValueError, match="Q4"):
        answer_sentences(partial)


def _true_count(norms, threshold):
    return sum(n > threshold for n in norms)


def test_clip_bound_never_exceeds_the_true_count_and_is_reached():
    rng = random.Random(0)
    for _ in range(2000):
        m = rng.randint(1, 8)
        norms = [rng.uniform(0.2, 3.0) for _ in range(m)]
        mean, largest = sum(norms) / m, max(norms)
        assert clipped_at_least(mean, largest, 1.0, m) <= _true_count(norms, 1.0)
    # tight when the clipped norms all equal the largest and the rest sit at the threshold
    for m, k in itertools.product(range(1, 9), range(0, 9)):
        if k > m:
            continue
        norms = [2.5] * k + [1.0] * (m - k)
        assert clipped_at_least(sum(norms) / m, max(norms), 1.0, m) == k


def test_clip_bound_catches_a_bound_divided_by_the_largest_norm():
    # the plausible slip (mean - c) / largest would say 1 here; two norms of 1.5 give exactly 2
    assert clipped_at_least(1.5, 1.5, 1.0, 2) == 2


def _displayed_by(cell_source: str, monkeypatch, namespace: dict) -> str:
    """Run one notebook cell with IPython's display captured; the Markdown it showed, joined."""
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **_: shown.extend(objs))
    namespace = {"Markdown": IPython.display.Markdown, "display": IPython.display.display, **namespace}
    exec(compile(cell_source, "<cell>", "exec"), namespace)
    return " ".join(o.data for o in shown if isinstance(o, IPython.display.Markdown))


def _cell_after(notebook: str, marker: str) -> str:
    """The first code cell after the markdown cell that contains ``marker``."""
    cells = json.loads((ROOT / "book" / notebook).read_text())["cells"]
    start = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and marker in "".join(c["source"]))
    return next("".join(c["source"]) for c in cells[start + 1 :] if c["cell_type"] == "code")


def test_the_closing_displays_the_generated_headline(results, monkeypatch):
    # fails if Chapter 16's closing writes its own sentence instead of headline_sentence's (Chapter 1's plain
    # answer is tested in tests/book/test_reading_map.py)
    headline = headline_sentence(results)
    closing = _cell_after("16_conclusion.ipynb", "## Closing")
    shown = _displayed_by(
        closing, monkeypatch, {"confirmed": results, "interval_text": interval_text, "headline_sentence": headline_sentence,
                               "load_study": load_study}
    )
    assert headline in shown
    # the capture itself: a cell showing another sentence is not taken for the headline
    assert headline not in _displayed_by('display(Markdown("SAPO finished above GRPO."))', monkeypatch, {})


def test_step_size_story_counts_rollout_steps_whose_mean_norm_exceeds_the_clip():
    # catches: the clip share read from the largest norm instead of the mean (both of these planted rows have a
    # largest norm above 1, only the second a mean above it: 1 of 2, not 2 of 2)
    from types import SimpleNamespace

    from sapo_lab.evidence.confirmatory import step_size_story

    rows = [{"optim/grad_norm": 0.8, "optim/grad_norm_max": 1.5, "losses/approx_kl": 0.01},
            {"optim/grad_norm": 1.2, "optim/grad_norm_max": 2.0, "losses/approx_kl": 0.03}]
    run = SimpleNamespace(config={"optimization": {"max_grad_norm": 1.0, "steps_per_generation": 4}}, rows=rows)
    study = SimpleNamespace(name="planted", select=lambda method: [run])
    story = step_size_story(study, methods=("sapo",))["sapo"]
    assert story.mean_above == 0.5
    # second row: 4 x 1.2 <= (4 - k) x 1 + k x 2.0 needs k >= 0.8, so at least 1 of the 8 updates was clipped
    assert story.clipped_at_least == pytest.approx(1 / 8)
    assert story.approx_kl == pytest.approx(0.02)
    assert (story.rollout_steps, story.minibatches, story.max_grad_norm) == (2, 4, 1.0)


def test_tuning_caveats_rank_each_pick_among_its_arms_settings_on_eval():
    # catches: the eval rank counted from the worst setting (sorted without reverse); the rank is worked out here
    # from each run's recorded final Pass@1: 1 + the settings of the arm whose seed mean is higher than the pick's
    import statistics

    from sapo_lab.evidence.confirmatory import tuning_caveats

    study = load_study("confirm_addition")
    caveats = tuning_caveats(study)
    for arm, settings in caveats.grids.items():
        means = {m: statistics.mean(r.record["final_pass1"] for r in study.select(m)) for m in settings}
        pick = caveats.chosen[arm]
        assert caveats.eval_rank[arm] == 1 + sum(v > means[pick] for v in means.values())
    assert set(caveats.eval_rank.values()) != {2}  # the committed ranks tell the best from the worst


def test_the_headline_says_which_study_the_tuned_gap_is_on(results):
    # catches "left the gap at ..." with no study: the tuned answer's task and M read here from the declaration
    # that declares its tuning arm and from one of that study's config.json files
    for path in sorted((ROOT / "experiments").glob("confirm_*.json")):
        declared = json.loads(path.read_text())
        if any(arm["id"] == "Q4" for arm in declared["analysis"].get("tuning", [])):
            study = path.stem
    (first, *_) = sorted((ROOT / "results" / study / "runs").iterdir())
    config = json.loads((first / "config.json").read_text())
    task = {"addition": "two-digit addition"}[config["task"]["name"]]
    m = config["optimization"]["steps_per_generation"]
    q4 = interval_text(results["Q4"]["comparison"])
    assert f"left the gap on {task} at M = {m} at {q4}." in headline_sentence(results)
