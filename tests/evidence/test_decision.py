"""The decision table and its sentences: every declared answer said, each verdict from its interval, each claim
within the cells it names (planted rows and cells change the sentence that would overreach)."""

from dataclasses import replace
from pathlib import Path

import pytest
from _planted_gaps import BELOW, NEAR, SEEDS
from _planted_gaps import cell as _cell
from _planted_gaps import comparison as _cmp

from sapo_lab.evidence import decision
from sapo_lab.evidence.confirmatory import interval_text
from sapo_lab.evidence.decision import Evidence, Row, reading, unsaid_answers

ROOT = Path(__file__).resolve().parents[2]


def _row(row_id, gaps, m=8, *, study="gate_map", declared=True, family=None, reject=None, tau=1.0, rule="shared",
         rates=(2e-4, 2e-4), **extra):
    cmp = _cmp(gaps)
    if reject is None:
        reject = cmp.t_p < 0.05
    return Row(id=row_id, study=study, task="addition", tau_pos=tau, staleness=(m,) if isinstance(m, int) else m,
               rates=rates, rate_rule=rule, checkpoint=extra.pop("checkpoint", "final"), comparison=cmp,
               declared=declared, family=family, p_adjusted=cmp.t_p, reject=reject, seeds=SEEDS, **extra)


def _evidence(**override):
    rows = {
        "Q1": replace(_row("Q1", BELOW, study="confirm_addition"), seeds=tuple(range(10, 20))),
        "G4a": _row("G4a", NEAR, 2, family="staleness", reject=False),
        "G4b": _row("G4b", BELOW, 4, family="staleness"),
        "G4c": _row("G4c", BELOW, 8, family="staleness", reject=False, replicates="Q1"),
        "G3": _row("G3", NEAR, 8, rule="dev", rates=(1e-4, 1e-4)),
        "G3 at best dev": _row("G3 at best dev", [g + 0.002 for g in NEAR], 8, rule="dev", rates=(1e-4, 1e-4), declared=False,
                               checkpoint="best dev"),
        "G5": _row("G5", BELOW, (2, 4, 8, 16), kind="slope"),
        "slope at lr 5e-5": _row("slope at lr 5e-5", NEAR, (2, 4, 8, 16), declared=False, kind="slope",
                                 rates=(5e-5, 5e-5)),
    }
    rows.update(override)
    cells = [_cell(5e-5, m, NEAR) for m in (2, 4, 8, 16)] + [_cell(2e-4, m, BELOW) for m in (2, 4, 8, 16)]
    declared = {r.id: interval_text(r.comparison) for r in rows.values() if r.declared}
    return Evidence(list(rows.values()), cells, {}, "a planted toy", declared)


# ---------------------------------------------------------------- each verdict: a known-correct and a known-wrong case


def test_a_family_member_below_before_holm_only_says_so():
    late = _row("G4c", BELOW, family="staleness", reject=False)
    assert reading(late) == "declared: below zero before adjustment, not after"
    # known-wrong: the same interval with the family's adjustment passed must not carry the qualifier
    kept = replace(late, reject=True)
    assert reading(kept) == "declared: below zero, at the declared level"


def test_an_interval_holding_zero_is_no_difference_whatever_the_mean():
    assert reading(_row("G4a", NEAR, 2, family="staleness", reject=False)) == "declared: holds zero"
    # a mean below zero with an interval across it is still "holds zero", never "below"
    wide = _row("G4a", [-0.2, 0.15, -0.1, 0.12, -0.2, 0.1, -0.05, 0.02, -0.1, 0.1], 2, family="staleness")
    assert wide.comparison.mean < 0 and reading(wide) == "declared: holds zero"


def test_an_exploratory_reading_never_claims_the_declared_level():
    row = _row("G3 at best dev", BELOW, declared=False)
    assert reading(row) == "exploratory: below zero"  # a cell read alone is not a declared answer


WIDE = [-0.2, 0.15, -0.1, 0.12, -0.2, 0.1, -0.05, 0.02, -0.1, 0.1]  # mean -0.016, raw p about 0.58


def test_a_fresh_seed_repeat_says_how_its_level_compares_with_the_original():
    original = replace(_row("Q1", BELOW, study="confirm_addition"), seeds=tuple(range(10, 20)))
    # a repeat whose raw p meets the original's level and fails only Holm's adjustment: the declared (Holm) test
    # is its answer, the raw p only a comparison with the original's single test, never "did not" nor a confirmation
    late = replace(_row("G4c", BELOW, family="staleness", reject=False, replicates="Q1"), p_adjusted=0.076)
    assert late.comparison.t_p < 0.05
    assert reading(late, original).endswith(
        "; its declared test, Holm-adjusted within the staleness family, fails (p 0.076); raw p 0.000 is shown for "
        "comparison with Q1's single test at α 0.05, not as a confirmation")
    assert "meets" not in reading(late, original)
    # a repeat whose raw p misses the level too: the repeat did not reach it
    missed = replace(late, comparison=_cmp(WIDE))
    assert "the fresh-seed repeat did not" in reading(missed, original)
    # known-wrong: a repeat that did reach the level must not be reported as missing it
    assert "did not" not in reading(replace(late, reject=True), original)
    text = decision.decision_sentences(_evidence())
    assert ("G4c repeats Q1's configuration on fresh seeds (20–29 for 10–19), on CPU kernels not recorded for both "
            "studies, and found a similar gap, below zero before Holm's adjustment and not after") in text
    reached = decision.decision_sentences(_evidence(G4c=replace(late, reject=True)))
    assert "and found a similar gap, below zero, at the declared level (Holm-adjusted p = " in reached


def test_a_repeat_is_not_said_to_miss_a_level_its_original_did_not_reach_either():
    # catches: "the fresh-seed repeat did not" though the original did not reach the level either (the original's
    # reject dropped from the condition): neither reached it, so there is no miss to report
    original = replace(_row("Q1", BELOW, study="confirm_addition", reject=False), seeds=tuple(range(10, 20)))
    repeat = _row("G4c", BELOW, family="staleness", reject=False, replicates="Q1")
    assert reading(repeat, original) == "declared: below zero before adjustment, not after"


# ---------------------------------------------------------------- every declared answer said


def test_every_declared_answer_appears_and_an_omitted_one_is_named():
    ev = _evidence()
    text = decision.decision(ev)
    assert unsaid_answers(text, ev.declared) == []
    # known-wrong: a text without G4b, one naming G4b beside another answer's interval, an id inside a longer one
    assert unsaid_answers(text.replace("G4b", "G4x"), ev.declared) == ["G4b"]
    assert unsaid_answers("G4b: −0.001 [−0.002, +0.000].", {"G4b": "−0.055 [−0.077, −0.033]"}) == ["G4b"]
    assert unsaid_answers("G4bb: −0.055 [−0.077, −0.033].", {"G4b": "−0.055 [−0.077, −0.033]"}) == ["G4b"]


def test_the_decision_refuses_a_text_that_leaves_a_declared_answer_out():
    ev = _evidence()
    dropped = replace(ev, rows=[r for r in ev.rows if r.id != "G3"])  # G3 declared, its row lost
    with pytest.raises(ValueError, match="unsaid: G3"):
        decision.decision(dropped)


# ---------------------------------------------------------------- claims within their scope


def test_a_planted_cell_at_the_smallest_rate_changes_the_near_tie_claim():
    ev = _evidence()
    before = decision.decision_sentences(ev)
    assert "within ±0.001 (exploratory: 0 above zero, 0 below, 4 holding zero; the widest interval, " in before
    planted = replace(ev, cells=[*ev.cells[:3], _cell(5e-5, 16, BELOW), *ev.cells[4:]])
    after = decision.decision_sentences(planted)
    assert "within ±0.055 (exploratory: 0 above zero, 1 below, 3 holding zero; the widest interval, " in after


def test_a_planted_gap_at_m2_moves_m2_from_tied_to_trailed():
    before = decision.decision_sentences(_evidence())
    assert "no detectable difference at M = 2" in before and "SAPO finished below GRPO at M = 4 and 8:" in before
    after = decision.decision_sentences(_evidence(G4a=_row("G4a", BELOW, 2, family="staleness")))
    assert "no detectable difference at M = 2" not in after and "SAPO finished below GRPO at M = 2, 4 and 8:" in after


def test_the_trend_claim_names_its_rate_and_the_rates_where_it_fails():
    text = decision.decision_sentences(_evidence())
    assert "The gap grew with M at lr 2e-4 over M = 2 to 16 (G5:" in text
    assert "no trend was detected at lr 5e-5 over M = 2 to 16" in text
    # a slope at 5e-5 that does fall is not listed among the flat ones
    falling = _row("slope at lr 5e-5", BELOW, (2, 4, 8, 16), declared=False, kind="slope", rates=(5e-5, 5e-5))
    assert "no trend was detected" not in decision.decision_sentences(_evidence(**{"slope at lr 5e-5": falling}))


def test_the_instability_reading_needs_the_flags_and_a_tuned_gap_near_zero():
    tuned16 = _row("G3's rule at M = 16", NEAR, 16, rule="dev", rates=(5e-5, 1e-4), declared=False)
    g4d = _row("G4d", BELOW, 16, family="staleness")
    flags = {(2e-4, 16): {"sapo": (6, 10), "grpo": (0, 10)}}
    ev = replace(_evidence(G4d=g4d, tuned16=tuned16), collapse=flags)
    assert "most of M = 16's gap goes with SAPO's instability" in decision.decision_sentences(ev)
    # known-wrong: the tuned comparison at M = 16 still below zero, or no more SAPO flags than GRPO's
    still = replace(ev, rows=[replace(r, comparison=_cmp(BELOW)) if r.id == tuned16.id else r for r in ev.rows])
    assert "instability" not in decision.decision_sentences(still)
    even = replace(ev, collapse={(2e-4, 16): {"sapo": (0, 10), "grpo": (0, 10)}})
    assert "instability" not in decision.decision_sentences(even)


# ---------------------------------------------------------------- the committed studies


@pytest.fixture(scope="module")
def committed(committed_decision):
    return committed_decision


def test_the_committed_decision_says_every_declared_answer(committed):
    text = decision.decision(committed)
    assert set(committed.declared) >= {"Q1", "Q2", "Q3a", "Q3b", "Q3c", "Q4", "G1", "G2", "G3", "G4a", "G4b",
                                           "G4c", "G4d", "G5"}
    assert unsaid_answers(text, committed.declared) == []


def test_the_committed_repeat_is_found_from_the_configs(committed):
    # G4c's runs are Q1's with other seeds; no other map answer repeats a confirmatory one
    assert {r.id: r.replicates for r in committed.rows if r.replicates} == {"G4c": "Q1"}


def test_the_readme_states_the_generated_findings(committed):
    # fails when a rerun changes a row of the decision and the README still quotes the old sentences
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert " ".join(decision.readme_findings(committed).split()) in readme


def test_a_confirmatory_study_trained_for_other_steps_names_them():
    # catches the sentence's opening scale (the map's rollout steps) silently covering a study that trained
    # for a different number of steps (confirm_scratchpad: 50 against the map's 100)
    same = {r.id: replace(r, steps=100) for r in _evidence().rows}
    text = decision.decision_sentences(_evidence(**same))
    assert "rollout steps" not in text
    other = {**same, "Q1": replace(same["Q1"], steps=50)}
    assert "addition at M = 8 after 50 rollout steps, Q1:" in decision.decision_sentences(_evidence(**other))


def test_the_sentences_are_one_bullet_a_topic():
    # catches the topics run together into one paragraph again (where it tied and trailed, trend, tuning, repeats)
    lines = decision.decision_sentences(_evidence()).splitlines()
    assert len(lines) >= 3 and all(line.startswith("* ") for line in lines)


# ---------------------------------------------------------------- the answer, the levels, the change, the flags


def test_the_choice_follows_the_counts_of_declared_comparisons_by_side():
    # catches a choice written as text rather than counted: one declared comparison above zero at the declared
    # level and none below must flip the advice, and a table of ties must advise neither
    text = decision.answer_sentence(_evidence())
    assert "SAPO finished above GRPO in none of the 5 declared comparisons of the two and below it in 3" in text
    assert "prefer GRPO" in text
    up = [-g for g in BELOW]
    flipped = {k: _row(k, up, m, family=f) for k, m, f in (("G4b", 4, "staleness"), ("G4c", 8, "staleness"))}
    ties = {k: _row(k, NEAR, m) for k, m in (("Q1", 8), ("G3", 8))}
    assert "prefer SAPO" in decision.answer_sentence(_evidence(**flipped, **ties))
    mixed = decision.answer_sentence(_evidence(G4b=flipped["G4b"]))
    assert "favour neither method" in mixed and "prefer" not in mixed


def test_a_change_between_two_gaps_is_paired_by_seed_and_never_a_closing_when_it_holds_zero():
    # the G4c -> G3 change's interval worked out here: per seed differences of the two gaps, mean, SD and the t
    # quantile; catches "x% of it closed" from two means, and a change taken from the intervals' ends
    from scipy import stats

    base = _row("G4c", BELOW, family="staleness", reject=False)
    noisy = [b + w for b, w in zip(BELOW, WIDE, strict=True)]
    tuned = _row("G3", noisy, rule="dev", rates=(1e-4, 1e-4))
    d = [t - b for t, b in zip(noisy, BELOW, strict=True)]
    mean = sum(d) / len(d)
    sd = (sum((x - mean) ** 2 for x in d) / (len(d) - 1)) ** 0.5
    half = stats.t.ppf(0.975, len(d) - 1) * sd / len(d) ** 0.5
    expected = f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]".replace("-", "−")
    assert mean - half < 0 < mean + half
    ev = _evidence(G4c=base, G3=tuned)
    text = decision.decision_sentences(ev)
    assert f"the change, {expected} paired by seed (exploratory), holds zero" in text
    assert "clos" not in text and "%" not in text
    # known-right: a change whose interval lies above zero while the gap was below narrowed it
    narrowed = decision.decision_sentences(_evidence(G4c=base, G3=_row("G3", NEAR, rule="dev", rates=(1e-4, 1e-4))))
    assert "(exploratory), the gap narrowed" in narrowed


def test_the_table_shows_both_levels_the_steps_and_the_flags():
    # catches a table that shows gaps alone (a tie at a lower level looks like a tie at the best one), one without
    # the steps each study trained, and flags counted over another row's seeds
    row = replace(_row("Q2", BELOW, 4, study="confirm_scratchpad"), steps=50, levels=(0.383, 0.676),
                  flagged=(SEEDS[:6], ()))
    table = decision.decision_table([row])
    assert "| steps |" in table and "| SAPO Pass@1 | GRPO Pass@1 |" in table
    assert "| 4 | 50 | 2e-4 shared | final | 0.383 | 0.676 |" in table and "| 6 / 0 of 10 |" in table
    # the split of the gap by SAPO's flags, worked out here: the first six planted gaps against the last four
    hit, rest = sum(BELOW[:6]) / 6, sum(BELOW[6:]) / 4
    assert row.flag_split() == pytest.approx((hit, rest))


def test_an_exploratory_reading_that_repeats_a_declared_answers_runs_says_so():
    # catches dev tuning at M = 4 hidden because it kept the shared rate (its gap is G4b's, not a new reading)
    kept = _row("G3's rule at M = 4", BELOW, 4, rule="dev", declared=False, same_runs="G4b")
    assert reading(kept) == "exploratory: dev kept the shared rate, so these are G4b's runs"
    text = decision.decision_sentences(_evidence(kept=kept))
    assert "at M = 4 dev kept the shared rate for both methods, so the gap there stays G4b's" in text


def test_the_readme_findings_are_five_lines_under_a_link_to_chapter_16(committed):
    # catches the README's findings growing back into the chapter's full text, or losing the way to the table
    lines = decision.readme_findings(committed).splitlines()
    assert len(lines) == 6 and "(book/16_conclusion.ipynb)" in lines[0]
    assert all(line.startswith("* ") for line in lines[1:])
