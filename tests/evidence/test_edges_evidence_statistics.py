"""Evidence helpers at their edges: the exact-enumeration limit, a search limit, rank correlation sizes, tuning
ties, a lone test's p at alpha, a diverged run's endpoints, contrast declarations one step inside and outside
their rules, and the words of the gate map and the confirmatory answer chosen by planted intervals.

Every expected value is a literal worked out in the comment beside it; planted comparisons carry only the
fields the code reads (an interval typed by hand, so its side of zero is plain).
"""

import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from sapo_lab.evidence import confirmatory, gate_map
from sapo_lab.evidence.analysis import adjust_families, choose_tuned, endpoint_value, split_overlap
from sapo_lab.evidence.confirmatory import MechanismReading, clipped_at_least, headline_sentence, step_size_story
from sapo_lab.evidence.contrasts import check_contrasts
from sapo_lab.evidence.exploratory import Provenance, leading_loss, provenance, slope_at
from sapo_lab.evidence.gate_map import Cell, GateStanding, Setting, answer_bullets, cell_reading, plain_answer
from sapo_lab.evidence.paired import permutation_test, smallest_n, within_group_spearman
from sapo_lab.evidence.results import Run, Study


@dataclass(frozen=True)
class Planted:
    mean: float
    t_interval: tuple[float, float]
    method: str = "sapo"
    reference: str = "grpo"
    seeds: tuple = (1, 2)
    differences: tuple = (0.0, 0.0)


BELOW = Planted(-0.06, (-0.09, -0.03))
ACROSS = Planted(-0.01, (-0.03, 0.01))
ABOVE = Planted(0.05, (0.02, 0.08))


# ---------------------------------------------------------------- paired statistics at their limits


def test_sixteen_pairs_are_enumerated_exactly():
    """Catches `<` for `<=` on exact_up_to (16 pairs sampled instead of enumerated): sixteen equal differences
    reach |sum| only with all signs equal, 2 of the 2^16 patterns, so p = 2 / 65536 exactly; sampling would give
    (hits + 1) / (resamples + 1) instead."""
    assert permutation_test([0.25] * 16, exact_up_to=16) == 2 / 65536


def test_the_search_tries_n_equal_to_its_limit():
    """Catches `range(2, limit)`: the first n reaching the power is the limit itself (5), which must be found."""
    assert smallest_n(lambda n: 1.0 if n >= 5 else 0.0, 0.1, 0.8, 5, "pairs") == 5
    with pytest.raises(ValueError, match="more than 4 pairs needed"):
        smallest_n(lambda n: 1.0 if n >= 5 else 0.0, 0.1, 0.8, 4, "pairs")


def test_a_rank_correlation_needs_three_runs_and_three_are_enough():
    """Catches `< 2` for `< 3`: two runs are refused. Three runs in one group: rho = 1, and of the 3! = 6
    orderings of y two reach |rho| = 1 (the identity and the reversal), so p = 2/6."""
    rho, p = within_group_spearman([1, 2, 3], [10, 20, 30], [0, 0, 0])
    assert rho == pytest.approx(1.0) and p == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="at least 3 runs"):
        within_group_spearman([1, 2], [10, 20], [0, 0])


@pytest.mark.parametrize(("limit", "ok"), [(6, True), (7, True), (5, False)])
def test_exactly_max_permutations_are_allowed(limit, ok):
    """Catches `>=` for `>`: one group of three runs has 3! = 6 permutations, allowed at a limit of 6."""
    if ok:
        within_group_spearman([1, 2, 3], [10, 30, 20], [0, 0, 0], max_permutations=limit)
    else:
        with pytest.raises(ValueError, match="more than 5 within-group permutations"):
            within_group_spearman([1, 2, 3], [10, 30, 20], [0, 0, 0], max_permutations=limit)


# ---------------------------------------------------------------- endpoints, tuning and a lone test


def _run(method, seed, **record):
    return Run(f"{method}_seed{seed}", method, seed, {}, {"status": "done", **record}, Path("."))


def test_a_diverged_run_scores_zero_on_the_final_endpoints_only():
    """Catches every endpoint of a diverged run read as 0: its steps (37) and counters are what it recorded; only
    the final Pass@1 endpoints, which it never reached, score 0."""
    run = _run("sapo", 1, status="diverged", steps=37, final_pass1=None, rollout_tokens=900)
    assert endpoint_value(run, "final_pass1") == 0.0
    assert endpoint_value(run, "steps") == 37.0 and endpoint_value(run, "rollout_tokens") == 900.0


def test_tied_tuning_means_choose_the_first_declared_method():
    """Catches the tie going to the last declared method: both arms' settings average 0.5 on dev (0.4 and 0.6
    against 0.5 and 0.5), and the declared rule keeps the first."""
    runs = {"wide": [_run("wide", 1, final_dev_pass1=0.4), _run("wide", 2, final_dev_pass1=0.6)],
            "narrow": [_run("narrow", 1, final_dev_pass1=0.5), _run("narrow", 2, final_dev_pass1=0.5)]}
    study = SimpleNamespace(select=lambda m: runs[m])
    assert choose_tuned(study, {"sapo": ["wide", "narrow"]}, "final_dev_pass1", 2) == ({"sapo": "wide"}, 0)
    assert choose_tuned(study, {"sapo": ["narrow", "wide"]}, "final_dev_pass1", 2) == ({"sapo": "narrow"}, 0)


@pytest.mark.parametrize(("p", "reject"), [(0.05, False), (0.0499, True), (0.0501, False)])
def test_a_lone_test_rejects_only_below_alpha(p, reject):
    """Catches `<=` for `<`: a lone test with p exactly at alpha 0.05 does not reject."""
    results = [{"id": "Q1", "p": p}]
    adjust_families(results, 0.05)
    assert results[0]["reject"] is reject and results[0]["p_adjusted"] == p


def test_an_addition_of_a_number_to_itself_has_no_commuted_twin():
    """Catches `a+a` counted as its own twin: of the eval prompts 34+12 and 5+5, only 34+12 (twin 12+34, a
    training prompt) is a commuted addition; 5+5 is neither counted among additions nor as commuted. The final
    answer is the text after the last '=' (a scratchpad answer '7=1=46' ends in 46, a training answer)."""
    p = SimpleNamespace
    splits = {"train": [p(prompt="12+34", answer="46"), p(prompt="5+5", answer="01")],
              "eval": [p(prompt="34+12", answer="7=1=46"), p(prompt="5+5", answer="01")]}
    got = split_overlap(splits)
    assert got == {"eval": 2, "exact": 1, "additions": 1, "commuted": 1, "answer": 2}


# ---------------------------------------------------------------- contrast declarations


STUDY = {"methods": {"s2": {}, "s4": {}, "s8": {}, "g2": {}, "g4": {}, "g8": {}},
         "analysis": {"tests": []}, "selection": [{"by": "final"}]}


def _trend(n):
    points = [{"method": f"s{m}", "reference": f"g{m}", "x": float(i)} for i, m in enumerate((2, 4, 8)[:n])]
    return {"id": "G5", "question": "?", "kind": "trend", "test": "paired_t", "points": points}


def _tuned(arms, differ_in=("optimization.learning_rate",)):
    return {"id": "G3", "question": "?", "kind": "tuned", "test": "paired_t", "arms": arms,
            "tune_on": "final_dev_pass1", "differ_in": list(differ_in)}


def test_a_trend_needs_three_points():
    """Catches `< 2` for `< 3`: a trend through two points has no spread left to test; three are accepted."""
    check_contrasts([_trend(3)], STUDY, set())
    with pytest.raises(ValueError, match="a trend needs 'points', three or more"):
        check_contrasts([_trend(2)], STUDY, set())


def test_tuned_arms_must_have_the_same_number_of_settings():
    """Catches the size check dropped: an arm of three settings against one of two is not an equal budget."""
    check_contrasts([_tuned({"sapo": ["s2", "s4"], "grpo": ["g2", "g4"]})], STUDY, set())
    with pytest.raises(ValueError, match="two arms with the same number of methods"):
        check_contrasts([_tuned({"sapo": ["s2", "s4", "s8"], "grpo": ["g2", "g4"]})], STUDY, set())


def test_differ_in_needs_dotted_keys():
    """Catches the dot check dropped: 'learning_rate' alone is not a config path the pairing can remove."""
    with pytest.raises(ValueError, match="'differ_in' must list dotted config keys"):
        check_contrasts([_tuned({"sapo": ["s2"], "grpo": ["g2"]}, ("learning_rate",))], STUDY, set())


# ---------------------------------------------------------------- the confirmatory answer's guards and words


def test_the_headline_refuses_an_interval_that_ends_at_zero():
    """Catches `<= 0` for `< 0` in the headline's guard: Q4's interval [-0.1, 0.0] reaches zero, so "SAPO finished
    below GRPO" would overstate it."""
    results = {q: {"study": "nowhere", "comparison": replace_interval(BELOW)} for q in ("Q1", "Q2")}
    results["Q4"] = {"study": "nowhere", "comparison": replace_interval(Planted(-0.05, (-0.1, 0.0)))}
    with pytest.raises(ValueError, match="a confirmatory interval now reaches zero"):
        headline_sentence(results)


def replace_interval(planted):
    return SimpleNamespace(mean=planted.mean, t_interval=planted.t_interval, differences=[0.0] * 10)


def _mechanism_results(p):
    out = {}
    for i, gaps in zip(("Q3a", "Q3b", "Q3c"), (BELOW, BELOW, ACROSS), strict=True):
        out[i] = {"id": i, "comparison": gaps, "p": p[i], "p_adjusted": min(1.0, 3 * p[i]), "reject": False}
    return out


def test_a_kernel_interval_ending_at_zero_holds_zero():
    """Catches `lo < 0 < hi` for `lo <= 0 <= hi`: Q3c's interval [-0.02, 0.0] holds zero."""
    reading = MechanismReading(0.0, 0.4, 0.6, [], [], (-0.02, 0.0))
    text = reading.sentence(_mechanism_results({"Q3a": 0.02, "Q3b": 0.03, "Q3c": 0.5}))
    assert "an interval that holds zero" in text, text


def test_a_raw_p_exactly_at_alpha_is_not_below_it(monkeypatch):
    """Catches `<=` for `<` in raw_below_alpha: Q3a's raw p is exactly alpha (0.05), Q3b's a step below."""
    seeds = (1, 2)
    q1 = SimpleNamespace(mean=-0.1, seeds=seeds, differences=[-0.1, -0.1])
    part = SimpleNamespace(mean=-0.05, seeds=seeds, differences=[-0.05, -0.05], t_interval=(-0.08, -0.02))
    results = {"Q1": {"study": "confirm_addition", "comparison": q1}}
    for i, p in (("Q3a", 0.05), ("Q3b", 0.0499), ("Q3c", 0.5)):
        results[i] = {"id": i, "comparison": part, "p": p, "reject": False}
    monkeypatch.setattr(confirmatory, "load_study", lambda name: SimpleNamespace(
        declaration={"analysis": {"alpha": 0.05}}))
    assert confirmatory.mechanism_reading(results).raw_below_alpha == ["Q3b"]


@pytest.mark.parametrize(("mean", "largest", "fewest"), [
    (1.6, 2.0, 3),   # 4 * 1.6 = 6.4 <= (4 - k) * 1 + 2 k = 4 + k  ->  k >= 2.4  ->  3
    (1.5, 2.0, 2),   # 6.0 <= 4 + k  ->  k >= 2 exactly
    (1.0, 2.0, 0),   # a mean at the clip: nothing need exceed it
])
def test_the_fewest_clipped_norms_round_up(mean, largest, fewest):
    """Catches rounding to nearest (2.4 -> 2) where the bound needs the next whole norm (3)."""
    assert clipped_at_least(mean, largest, 1.0, 4) == fewest


def test_a_mean_norm_exactly_at_the_clip_is_not_above_it():
    """Catches `>=` for `>` in mean_above: of two rollout steps with mean norms 1.0 (at the clip 1.0) and 1.5,
    one lies above it (share 0.5); the clipped bound is 0 + 2 of 4 * 2 updates (0.25), and the KL mean 0.02."""
    rows = [{"optim/grad_norm": 1.0, "optim/grad_norm_max": 1.0, "losses/approx_kl": 0.01},
            {"optim/grad_norm": 1.5, "optim/grad_norm_max": 2.0, "losses/approx_kl": 0.03}]
    run = SimpleNamespace(config={"optimization": {"max_grad_norm": 1.0, "steps_per_generation": 4}}, rows=rows)
    study = SimpleNamespace(name="planted", select=lambda method: [run])
    story = step_size_story(study, methods=("sapo",))["sapo"]
    assert story.mean_above == 0.5 and story.clipped_at_least == 0.25
    assert story.approx_kl == pytest.approx(0.02)


# ---------------------------------------------------------------- the gate map's words


def _setting(method, loss, tau, lr, m):
    return Setting(method, loss, tau, tau * 1.05, lr, m)


def _cells(n):
    s = [_setting(f"sapo_{i}", "sapo", 1.0, 2e-4, 2 ** (i + 1)) for i in range(n)]
    return [Cell(x, _setting("grpo", "grpo", 1.0, 2e-4, x.staleness), 10, 10, False, None) for x in s]


@pytest.mark.parametrize(("n", "ellipsis"), [(4, False), (5, True), (3, False)])
def test_four_cells_are_listed_in_full_and_a_fifth_is_elided(n, ellipsis):
    """Catches `>= 4` for `> 4`: four cells are shown whole; only a fifth and beyond is replaced by '…'."""
    text = GateStanding(n, n, 10, 0.95, _cells(n), [], []).sentence()
    assert ("; …" in text) is ellipsis, text
    assert f"Of the {n} complete cells of the map, SAPO's gate" in text
    assert f"in {n} (τ 1, lr 0.0002, M 2; " in text
    # two of seven cells unfinished: the count is the difference, not the total (catches the total printed)
    partial = GateStanding(n, n + 2, 10, 0.95, _cells(n), [], []).sentence()
    assert f"Of the {n} complete cells of the map (2 cells not yet complete), " in partial


SETTINGS = {s.method: s for s in (
    _setting("s2", "sapo", 1.0, 2e-4, 2), _setting("g2", "grpo", 1.0, 2e-4, 2),
    _setting("s4", "sapo", 1.0, 2e-4, 4), _setting("g4", "grpo", 1.0, 2e-4, 4),
    _setting("s8", "sapo", 1.0, 2e-4, 8), _setting("g8", "grpo", 1.0, 2e-4, 8),
    _setting("tight", "sapo", 8.0, 2e-4, 8),
    _setting("s_lr1", "sapo", 1.0, 1e-4, 8), _setting("g_lr5", "grpo", 1.0, 5e-5, 8))}


def _answer(answer_id, cmp, **fields):
    return {"id": answer_id, "comparison": cmp, "p": 0.01, "status": "complete", "reject": False, **fields}


def _answers(x_of=lambda m: {2: 1.0, 4: 2.0, 8: 3.0}[m]):
    points = [{"method": f"s{m}", "reference": f"g{m}", "x": x_of(m)} for m in (2, 4, 8)]
    return [
        _answer("G1", ABOVE, method="tight", reference="g8", reject=True),
        _answer("G4a", ACROSS, method="s2", reference="g2", family="staleness", p_adjusted=0.9),
        _answer("G4b", BELOW, method="s4", reference="g4", family="staleness", p_adjusted=0.01, reject=True),
        _answer("G4c", BELOW, method="s8", reference="g8", family="staleness", p_adjusted=0.076),
        _answer("G3", Planted(-0.01, (-0.03, 0.01), method="s_lr1", reference="g_lr5"), kind="tuned",
                arms={"sapo": ["s8", "s_lr1"], "grpo": ["g8", "g_lr5"]}),
        _answer("G5", BELOW, kind="trend", points=points, reject=True),
    ]


def test_the_plain_answer_lists_only_comparisons_above_zero_and_names_each_methods_rate(monkeypatch):
    """Catches `>= 0` for `> 0` (G4a and G3 hold zero: not "above GRPO") and the two chosen rates swapped (dev
    chose 1e-4 for SAPO, 5e-5 for GRPO)."""
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: _answers())
    text = plain_answer(SimpleNamespace(), SETTINGS)
    assert text.startswith("SAPO finished above GRPO in G1. "), text
    assert "(SAPO chose 0.0001, GRPO 5e-05)" in text, text


def test_a_trend_on_log2_m_is_per_doubling_and_on_other_x_per_unit(monkeypatch):
    """Catches the natural log for log2: x = 1, 2, 3 at M = 2, 4, 8 is log2 M, a change per doubling of M."""
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: _answers())
    assert "* G5, change of SAPO − GRPO per doubling of M (M = 2, 4, 8, lr 0.0002):" in answer_bullets(
        SimpleNamespace(), SETTINGS)
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: _answers(lambda m: float(m)))
    assert "per unit of x (M = 2, 4, 8" in answer_bullets(SimpleNamespace(), SETTINGS)


def test_a_family_member_missing_holms_level_is_read_before_adjustment(monkeypatch):
    """Catches the qualifier tied to a missing adjusted p: G4c has its Holm-adjusted p (0.076) and did not reach
    the level, so its side is 'SAPO below GRPO before Holm's adjustment'; G4b, kept, is plain 'SAPO below GRPO'."""
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: _answers())
    text = answer_bullets(SimpleNamespace(), SETTINGS)
    assert "p = 0.01; SAPO below GRPO before Holm's adjustment, Holm-adjusted p = 0.076; does not reach" in text
    assert "p = 0.01; SAPO below GRPO, Holm-adjusted p = 0.01; reaches the declared level." in text


# ---------------------------------------------------------------- exploratory readings


def _cell_at(m, cmp):
    return Cell(_setting(f"s{m}", "sapo", 1.0, 2e-4, m), _setting(f"g{m}", "grpo", 1.0, 2e-4, m), 2, 2, False, cmp)


def test_a_slope_needs_three_cells():
    """Catches `< 2` for `< 3`: a slope through two cells has no spread to test and is refused in one line."""
    cells = [_cell_at(m, BELOW) for m in (2, 4)]
    with pytest.raises(ValueError, match="needs three or more complete cells"):
        slope_at(SimpleNamespace(), SETTINGS, learning_rate=2e-4, cells=cells)


def test_one_resumed_run_is_said_in_the_singular():
    """Catches 'run was' and 'runs were' swapped: the sentence, assembled here word by word from the counts."""
    text = Provenance(3, 2, 1, ["abc1234", "def5678+"], ["grpo_seed11"], [], 20).sentence()
    assert text == ("The study's record lists 3 invocations; 2 of them trained runs, and 1 of those ran from a tree "
                    "with uncommitted changes (commits abc1234, def5678+; '+' marks them). 1 run was resumed after "
                    "an interruption (grpo_seed11); every one of the 20 runs was trained by a recorded invocation.")
    two = Provenance(3, 2, 1, ["abc1234"], ["a", "b"], [], 20).sentence()
    assert "2 runs were resumed after an interruption (a, b)" in two


def test_an_invocation_that_only_skipped_runs_trained_nothing():
    """Catches every invocation with actions counted as training: one that skipped its runs (a rerun to read the
    verdict) neither trained nor counts among the dirty trees."""
    invocations = [{"actions": {"r1": "started"}, "git_commit": "abc1234567", "git_dirty": False},
                   {"actions": {"r1": "skipped"}, "git_commit": "def5678901", "git_dirty": True}]
    folder = SimpleNamespace(run=lambda run_id: SimpleNamespace(read_wall=lambda: [{"action": "started"}]))
    study = SimpleNamespace(environment={"invocations": invocations}, runs=[SimpleNamespace(run_id="r1")],
                            folder=folder)
    got = provenance(study)
    assert (got.invocations, got.training_invocations, got.dirty_training_invocations) == (2, 1, 0)
    assert got.commits == ["abc1234"] and got.unrecorded_runs == []


def test_a_map_led_by_one_loss_throughout_counts_every_configuration():
    """Catches the run of the leading loss one short when no other loss breaks it: two SAPO settings and no
    GRPO, so SAPO leads with 2 in a row."""
    runs = {"a": [_run("a", 1, final_pass1=0.6)], "b": [_run("b", 1, final_pass1=0.5)]}
    study = Study("planted", Path("."), {"methods": {"a": {}, "b": {}},
                                         "analysis": {"endpoint": {"metric": "final_pass1"}}},
                  [*runs["a"], *runs["b"]], [])
    settings = {"a": _setting("a", "sapo", 1.0, 2e-4, 2), "b": _setting("b", "sapo", 2.0, 2e-4, 2)}
    assert leading_loss(study, settings) == ("sapo", 2)


# ---------------------------------------------------------------- SAPO's half-width


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0, 8.81])
def test_the_half_width_is_where_the_gate_halves(tau):
    """Catches another constant for 2 asinh(1): at r - 1 = w the gate sech^2(τ w / 2) is 1/2, checked here in
    closed form (1 / cosh^2)."""
    from sapo_lab.half_width import sapo_half_width

    w = sapo_half_width(tau)
    assert 1.0 / math.cosh(tau * w / 2) ** 2 == pytest.approx(0.5)


@pytest.mark.parametrize("tau", [float("inf"), float("nan"), 0.0, -1.0, "warm"])
def test_a_temperature_that_is_not_finite_and_positive_is_refused_in_one_line(tau):
    """Catches the finiteness check dropped: an infinite τ would give a half-width of 0 without complaint."""
    from sapo_lab.half_width import sapo_half_width

    with pytest.raises(ValueError, match="temperature tau must be"):
        sapo_half_width(tau)


@pytest.mark.parametrize(("answer", "words"), [
    ({"family": "staleness", "reject": None, "waiting_for": ["G4d"]},
     "below zero before Holm's adjustment, which is still pending"),
    ({"family": "staleness", "reject": False}, "below zero before Holm's adjustment, not after"),
    ({"family": "staleness", "reject": True}, "below zero, at the declared level"),
    ({"reject": False}, "below zero, not at the declared level"),
])
def test_a_cells_level_is_pending_while_its_family_waits(answer, words):
    """Catches a family still waiting for members (reject None) read as Holm's failure ('not after'): until the
    adjustment runs, the cell's level is pending; once run, kept and not kept read as before."""
    cell = _cell_at(8, Planted(-0.06, (-0.09, -0.03), method="s8", reference="g8"))
    got = cell_reading(cell, [{"id": "G4c", "comparison": cell.comparison, **answer}])
    assert got == f"declared (G4c): {words}"


def test_a_waiting_family_names_every_pending_member():
    """Catches only the first pending member named: G4c's family waits for G4a and G4d."""
    from sapo_lab.evidence.gate_map import _level_text

    assert _level_text({"waiting_for": ["G4a", "G4d"]}) == "; its family's Holm adjustment waits for G4a, G4d"
    assert _level_text({"family": "staleness", "p_adjusted": 0.076, "reject": False}) == (
        ", Holm-adjusted p = 0.076; does not reach the declared level")


@pytest.mark.parametrize(("declared", "kind"), [(True, "a declared question's cell"), (False, "an exploratory cell")])
def test_the_doctors_nearest_cell_says_whether_a_declared_question_reads_it(monkeypatch, declared, kind):
    """Catches the cell's kind inverted: a cell a declared question compares is 'a declared question's cell', any
    other 'an exploratory cell'. The nearest cell is planted (share 2% there, 3% here, inside the map's 1%-5%)."""
    from sapo_lab.evidence import doctor_map

    cmp = Planted(-0.06, (-0.09, -0.03), seeds=tuple(range(10)))
    cell = Cell(_setting("s8", "sapo", 2.0, 2e-4, 8), _setting("g8", "grpo", 1.0, 2e-4, 8), 10, 10, declared, cmp)
    monkeypatch.setattr(doctor_map, "nearest_cell", lambda study, activity: (cell, 0.02, (0.01, 0.05)))
    monkeypatch.setattr(doctor_map, "method_settings", lambda study: {})
    study = SimpleNamespace(name="gate_map", runs=[], declaration={"analysis": {"alpha": 0.05}, "seeds": [0, 1]})
    head = doctor_map.map_lines("gate active", 0.03, study)[0]
    assert head == ("gate map, nearest cell by the share of signal the gate removed (there 2.00% on its first seed, "
                    f"here 3.00%): SAPO τ+ 2, lr 0.0002, M = 8 ({kind}): SAPO − GRPO in final Pass@1 = "
                    "\u22120.060 [\u22120.090, \u22120.030] (95% t interval, 10 paired seeds), SAPO below GRPO")
