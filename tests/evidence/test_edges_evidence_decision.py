"""The decision's words at their boundaries: each condition that chooses a phrase, tried on it and a step to
each side, with planted rows whose side of zero, counts and p-values are typed here as literals.

A planted comparison is a plain record of the fields the sentences read (no statistics behind it), so each
expected word follows from a literal in the test, never from ``side_of_zero`` or ``reading``.
"""

import json
from dataclasses import dataclass, replace
from types import SimpleNamespace

import pytest

from sapo_lab.evidence import decision
from sapo_lab.evidence.decision import Evidence, Replication, Row, reading
from sapo_lab.evidence.gate_map import Cell, Setting
from sapo_lab.evidence.paired import compare

SEEDS = tuple(range(20, 30))


@dataclass(frozen=True)
class Planted:
    """The fields of a paired comparison the decision reads; the interval and p are literals."""

    mean: float
    t_interval: tuple[float, float]
    t_p: float = 0.01
    seeds: tuple = SEEDS
    differences: tuple = (0.0,) * 10
    method: str = "sapo"
    reference: str = "grpo"


BELOW = Planted(-0.06, (-0.09, -0.03))
ACROSS = Planted(-0.01, (-0.03, 0.01), t_p=0.4)
ABOVE = Planted(0.05, (0.02, 0.08))


def _row(row_id, cmp, m=8, **extra):
    fields = dict(id=row_id, study="gate_map", task="addition", tau_pos=1.0,
                  staleness=m if isinstance(m, tuple) else (m,), rates=(2e-4, 2e-4),
                  rate_rule="shared", checkpoint="final", comparison=cmp, declared=True, seeds=SEEDS)
    fields.update(extra)
    return Row(**fields)


def _evidence(rows, **extra):
    return Evidence(list(rows), [], {}, "a planted toy", {}, **extra)


# ---------------------------------------------------------------- a repeat's raw p at the declared alpha


ORIGINAL = _row("Q1", BELOW, study="confirm_addition", reject=True, seeds=tuple(range(10, 20)))


@pytest.mark.parametrize(("p", "meets"), [(0.05, True), (0.049, True), (0.051, False)])
def test_a_lone_repeats_raw_p_on_alpha_meets_it(p, meets):
    """Catches `<` for `<=` in "raw p meets the α": p = 0.05 at α 0.05 meets the level (p <= α, the rule the
    reading states); 0.051 does not, so the repeat is said to have missed it."""
    repeat = _row("G4c", replace(BELOW, t_p=p), reject=False, alpha=0.05)
    text = reading(repeat, ORIGINAL)
    if meets:
        assert text.endswith(f"; raw p {p:.3f} meets the α 0.05 at which Q1 was tested alone"), text
    else:
        assert text.endswith("; Q1 reached it: the fresh-seed repeat did not"), text


@pytest.mark.parametrize(("p", "meets"), [(0.05, True), (0.051, False)])
def test_a_family_repeats_raw_p_on_alpha_takes_the_holm_branch(p, meets):
    """Catches `<` for `<=` in the Holm branch: a family member with raw p = α is the case "its declared test,
    Holm-adjusted ..., fails", not "the fresh-seed repeat did not"."""
    repeat = _row("G4c", replace(BELOW, t_p=p), reject=False, family="staleness", p_adjusted=0.1, alpha=0.05)
    text = reading(repeat, ORIGINAL)
    assert ("its declared test, Holm-adjusted within the staleness family, fails (p 0.100)" in text) is meets, text
    assert ("the fresh-seed repeat did not" in text) is not meets, text


# ---------------------------------------------------------------- the answer sentence's clauses


def _answer_rows(g4b_reject, g4c_reject, slope):
    return [_row("G4b", BELOW, 4, family="staleness", reject=g4b_reject),
            _row("G4c", BELOW, 8, family="staleness", reject=g4c_reject),
            _row("G5", slope, (2, 4, 8, 16), kind="slope", reject=slope is BELOW)]


def test_the_declared_level_only_clause_appears_only_when_some_trailing_m_missed_it():
    """Catches `if kept:` for `if kept and kept != trailing`: with every trailing M kept by Holm the sentence must
    not say "(at the declared level at M = 4 and 8 only)"; with M = 8 not kept it says "at M = 4 only"."""
    all_kept = decision.answer_sentence(_evidence(_answer_rows(True, True, BELOW)))
    assert "SAPO finished below at M = 4 and 8 with lr 2e-4 shared, more with each doubling of M (G5)." in all_kept
    assert "only)" not in all_kept
    one_kept = decision.answer_sentence(_evidence(_answer_rows(True, False, BELOW)))
    assert "SAPO finished below at M = 4 and 8 with lr 2e-4 shared (at the declared level at M = 4 only)" in one_kept


@pytest.mark.parametrize(("slope", "said"), [(BELOW, True), (ACROSS, False), (ABOVE, False)])
def test_more_with_each_doubling_needs_a_declared_slope_below_zero(slope, said):
    """Catches `<= 0` for `< 0` on the declared slope: a slope whose interval holds zero (or lies above it) shows
    no growth of the gap with M, so "more with each doubling of M" must not be said."""
    text = decision.answer_sentence(_evidence(_answer_rows(True, True, slope)))
    assert ("more with each doubling of M (G5)" in text) is said, text


# ---------------------------------------------------------------- the best tied level against the best GRPO


def _tied_evidence(levels, finals):
    tie = Planted(0.001, (-0.01, 0.012), t_p=0.8, method="sapo_2", reference="grpo_2")
    sapo = Setting("sapo_2", "sapo", 1.0, 1.05, 2e-4, 2)
    grpo_2 = Setting("grpo_2", "grpo", 1.0, 1.05, 2e-4, 2)
    grpo_4 = Setting("grpo_4", "grpo", 1.0, 1.05, 2e-4, 4)
    cells = [Cell(sapo, grpo_2, 10, 10, True, None),
             Cell(replace(sapo, method="sapo_4", staleness=4), grpo_4, 10, 10, False, None)]
    row = _row("G4a", tie, 2, family="staleness", reject=False)
    return Evidence([row], cells, {}, "a planted toy", {}, levels, [], finals)


@pytest.mark.parametrize(("best_grpo", "said"), [(0.5, False), (0.501, True), (0.499, False)])
def test_the_best_tied_level_is_said_only_below_the_best_grpo_level(best_grpo, said):
    """Catches `>` for `>=` in "stayed at or below ...": where the tied configurations' best level equals the map's
    best GRPO level (0.5 against 0.5) there is nothing below it to report; 0.001 above it, the clause appears."""
    levels = {"sapo_2": 0.5, "grpo_2": 0.45, "grpo_4": best_grpo}
    text = decision.answer_sentence(_tied_evidence(levels, {}))
    assert ("where both methods' seed-mean Pass@1 stayed at or below 0.500" in text) is said, text


def test_two_shared_seeds_are_enough_for_the_paired_comparison_with_the_best_grpo():
    """Catches `> 2` for `>= 2`: with finals on exactly two shared seeds the paired interval is given. Its value,
    worked out here: differences 0.45 - 0.55 = -0.10 and 0.50 - 0.56 = -0.06, mean -0.080, SD 0.02 sqrt 2, a t
    quantile of 12.706 at one degree of freedom: half-width 12.706 * 0.028284 / sqrt 2 = 0.254."""
    levels = {"sapo_2": 0.475, "grpo_2": 0.45, "grpo_4": 0.555}
    finals = {"sapo_2": {1: 0.45, 2: 0.50}, "grpo_4": {1: 0.55, 2: 0.56}}
    text = decision.answer_sentence(_tied_evidence(levels, finals))
    assert ("the best of those configurations (SAPO, lr 2e-4, M = 2) against the map's best GRPO configuration, "
            "picked after the fact (lr 2e-4, M = 4: 0.555), is \u22120.080 [\u22120.334, +0.174] paired by seed "
            "(exploratory: holds zero)") in text, text
    one = decision.answer_sentence(_tied_evidence(levels, {"sapo_2": {1: 0.45}, "grpo_4": {1: 0.55}}))
    assert "paired by seed" not in one


# ---------------------------------------------------------------- the collapse-flag reading at half the runs


def _flagged_row(sapo_flags, grpo_flags):
    return _row("Q2", BELOW, 4, study="confirm_scratchpad", task="scratchpad_addition", reject=True,
                flagged=(SEEDS[:sapo_flags], SEEDS[:grpo_flags]))


@pytest.mark.parametrize(("sapo", "grpo", "said"), [
    (5, 0, True),    # exactly half of SAPO's ten runs: "at least half"
    (4, 0, False),   # one short of half
    (6, 5, True),    # fewer of GRPO's
    (5, 5, False),   # as many of GRPO's: not "fewer"
])
def test_the_instability_reading_counts_at_least_half_and_strictly_fewer(sapo, grpo, said):
    """Catches `>` for `>=` in "at least half of SAPO's runs" (5 of 10 is half) and `<=` for `<` in "fewer of
    GRPO's" (5 against 5 is not fewer)."""
    text = decision.decision_sentences(_evidence([_flagged_row(sapo, grpo)]))
    phrase = "the collapse rule flagged at least half of SAPO's runs and fewer of GRPO's in scratchpad addition"
    assert (phrase in text) is said, text
    if said:
        assert f"(Q2: {sapo} of 10 SAPO runs against {grpo} of 10 GRPO runs" in text


def test_the_flag_split_needs_both_flagged_and_unflagged_seeds():
    """Catches a split reported with one side empty: every seed flagged leaves no "others" to compare with."""
    assert _flagged_row(10, 0).flag_split() is None
    assert _flagged_row(0, 0).flag_split() is None


# ---------------------------------------------------------------- exploratory readings on both sides


def test_an_exploratory_reading_that_holds_zero_is_listed_with_those_above_it():
    """Catches `> 0` for `>= 0`: a reading whose interval holds zero belongs under "hold zero or lie above it"."""
    rows = [_row("G4a at best dev", ACROSS, 2, declared=False, checkpoint="best dev"),
            _row("G4b at best dev", BELOW, 4, declared=False, checkpoint="best dev")]
    text = decision.decision_sentences(_evidence(rows))
    assert ("hold zero or lie above it: G4a at best dev: \u22120.010 [\u22120.030, +0.010]; below zero: "
            "G4b at best dev: \u22120.060 [\u22120.090, \u22120.030]") in text, text


def test_a_narrow_gate_row_is_at_the_declared_level_only_when_holm_kept_it():
    """Catches the qualifier read from the side instead of Holm's decision: a τ 0.25 row below zero that Holm did
    not keep is "below zero before adjustment, not after", never "at the declared level"."""
    narrow = _row("G2", BELOW, 8, tau_pos=0.25, family="gate", reject=False)
    text = decision.decision_sentences(_evidence([narrow]))
    assert "with narrower gates at M = 8 (τ 0.25, G2: \u22120.060 [\u22120.090, \u22120.030], below zero before " \
           "adjustment, not after)" in text, text


# ---------------------------------------------------------------- a repeat beside its original


def test_means_on_each_others_interval_ends_are_a_similar_gap():
    """Catches `<` for `<=` in "a mean inside the other's interval": the repeat's mean is exactly the original's
    lower end and the original's mean exactly the repeat's upper end, so each lies inside the other."""
    original = _row("Q1", Planted(-0.075, (-0.125, -0.025)), study="confirm_addition", reject=True)
    repeat = _row("G4c", Planted(-0.125, (-0.175, -0.075)), family="staleness", reject=True, p_adjusted=0.01,
                  replicates="Q1")
    text = decision.decision_sentences(_evidence([original, repeat]))
    assert "and found a similar gap, below zero, at the declared level (Holm-adjusted p = 0.010)" in text, text


# ---------------------------------------------------------------- how a replication ran


def _replication(**fields):
    base = dict(study="confirm_addition", question="Q1",
                comparison={"mean": -0.05, "t_interval": (-0.09, -0.01), "p": 0.02}, verdict="consistent",
                kernels="aaaa", setting=None, cpu=None, committed_kernels=("bbbb",), committed_cpu=None)
    base.update(fields)
    return Replication(**base)


def test_resumed_runs_agree_in_number():
    """Catches 'was' and 'were' swapped: one resumed run 'was', two 'were'."""
    one = _replication(resumed=("grpo_seed11",)).history()
    two = _replication(resumed=("grpo_seed11", "sapo_seed12")).history()
    assert one == "grpo_seed11 was resumed from a checkpoint partway through"
    assert two == "grpo_seed11 and sapo_seed12 were resumed from a checkpoint partway through"


def test_one_commit_with_and_without_changes_is_one_commit():
    """Catches `>= 1` for `> 1` distinct commits: two invocations of one commit, one with uncommitted changes,
    ran from 'one commit', not 'different commits'."""
    same = _replication(commits=(("9696f35", False), ("9696f35", True))).history()
    assert same == "its invocations ran from one commit (9696f35 and 9696f35 with uncommitted changes)"
    other = _replication(commits=(("9696f35", False), ("36fe895", False))).history()
    assert other == "its invocations ran from different commits (9696f35 and 36fe895)"


@pytest.mark.parametrize(("shards", "who"), [(0, "its invocations"), (1, "its invocations"),
                                             (3, "its three shards"), (10, "its ten shards"),
                                             (11, "its 11 shards")])
def test_the_shard_count_in_words(shards, who):
    """Catches `>= 1` for `> 1` shards (a single part is not 'its one shards') and the number words read one past
    their list (11 has no word: written as digits; 10 is 'ten')."""
    text = _replication(commits=(("9696f35", False), ("36fe895", True)), shards=shards).history()
    assert text.startswith(f"{who} ran from different commits"), text


def test_the_shard_count_is_the_total_after_the_slash():
    """Catches the shard's index (before the slash) read as the count: `--shard 0/2` and `--shard 1/2` are 2."""
    invocations = [{"argv": ["sapo_lab", "replicate", "--shard", "0/2"]},
                   {"argv": ["sapo_lab", "replicate", "--shard", "1/2"]}]
    assert decision._shard_count(invocations) == 2
    assert decision._shard_count([{"argv": ["sapo_lab", "replicate"]}]) == 0


@pytest.mark.parametrize(("avx512", "avx2", "words"), [(True, True, "AVX-512"), (False, True, "AVX2, no AVX-512"),
                                                       (False, False, "no AVX2")])
def test_a_kernels_cpu_names_its_vector_units(tmp_path, avx512, avx2, words):
    """Catches the AVX2 and no-AVX2 words swapped: each CPU kind's flags typed here decide its words."""
    kinds = {"kinds": [{"model": "AMD EPYC", "avx512f": avx512, "avx2": avx2, "fingerprints": {"native": "ffff"}}]}
    (tmp_path / "kernel_fingerprints.json").write_text(json.dumps(kinds))
    assert decision._kernel_cpu("ffff", tmp_path) == f"AMD EPYC, {words}"
    assert decision._kernel_cpu("eeee", tmp_path) is None


def test_a_studys_kernels_leave_out_those_it_is_known_not_to_reproduce_on():
    """Catches `differs_from` ignored: a fingerprint the kernel record lists as not reproducing is not the study's."""
    folder = SimpleNamespace(read_invocations=lambda: [{"kernel_fingerprint": "aaaa"}, {"kernel_fingerprint": "cccc"}],
                             read_kernel_record=lambda: {"kernel_fingerprint": "bbbb", "differs_from": ["cccc"]})
    assert decision.study_kernels(SimpleNamespace(folder=folder)) == ("aaaa", "bbbb")


# ---------------------------------------------------------------- the change between two gaps


def test_a_change_away_from_zero_widens_a_gap_below_zero():
    """Catches the base gap's sign flipped in 'narrowed'/'widened': a change below zero on a gap below zero moves
    it away from zero (widened); the same change on a gap above zero moves it toward zero (narrowed). The
    change's differences are typed so its interval lies below zero (-0.05 +- 0.01 alternating)."""
    base_gaps = [-0.05] * 10
    moved = [-0.10 + (0.01 if i % 2 else -0.01) for i in range(10)]
    base = _row("G4c", compare({s: (g, 0.0) for s, g in zip(SEEDS, base_gaps, strict=True)}))
    tuned = _row("G3", compare({s: (g, 0.0) for s, g in zip(SEEDS, moved, strict=True)}))
    change = decision.change_between(base, tuned)
    assert change.t_interval[1] < 0
    assert decision._change_words(base, change) == "the gap widened"
    up = _row("G4c", compare({s: (-g, 0.0) for s, g in zip(SEEDS, base_gaps, strict=True)}))
    assert decision._change_words(up, change) == "the gap narrowed"


# ---------------------------------------------------------------- the table's columns and the answered scope


def test_the_table_puts_declared_answers_first_with_each_rows_gate_and_m_range():
    """Catches the table's order reversed (an exploratory reading above the declared answers), a temperature
    below 1 hidden as if it were the paper's τ 1, and a slope row's M range ending at its second M (2–4 for
    2–16). The rows are given exploratory first; the table must list G5 and G4b, then the τ 0.25 reading."""
    rows = [_row("G2 at best dev", BELOW, 8, tau_pos=0.25, declared=False, checkpoint="best dev"),
            _row("G5", BELOW, (2, 4, 8, 16), kind="slope", reject=True),
            _row("G4b", BELOW, 4, family="staleness", reject=True)]
    lines = decision.decision_table(rows).splitlines()[2:]
    assert [line.split(" | ")[0] for line in lines] == ["| G5", "| G4b", "| G2 at best dev (τ 0.25)"]
    assert lines[0].startswith("| G5 | addition | 2–16 |  | 2e-4 shared | final |"), lines[0]  # no steps given
    assert "per doubling" in lines[0] and "per doubling" not in lines[1]


def test_the_answered_scope_names_only_confirmatory_answers_off_zero():
    """Catches a confirmatory answer whose interval holds zero named among the regimes the studies answer: Q1
    (below zero) is named, Q2 (holding zero) is not."""
    rows = [_row("Q1", BELOW, 8, study="confirm_addition", reject=True),
            _row("Q2", ACROSS, 4, study="confirm_scratchpad", task="scratchpad_addition", reject=False)]
    assert decision.where_answered(_evidence(rows)) == (
        "At that scale the declared studies answer the question for M = 8 on addition (Q1), at the shared lr 2e-4.")


def test_kernels_are_the_same_only_when_every_fingerprint_agrees():
    """Catches an overlap taken for the same kernels: a repeat made on aaaa and bbbb did not run on its original's
    kernels (aaaa alone), though they share one fingerprint."""
    original = _row("Q1", BELOW, kernels=("aaaa",))
    assert decision._kernels_between(_row("G4c", BELOW, kernels=("aaaa",)), original) == (
        "on the same CPU kernels (fingerprint aaaa)")
    assert decision._kernels_between(_row("G4c", BELOW, kernels=("aaaa", "bbbb")), original) == (
        "on other CPU kernels (fingerprint aaaa, bbbb; Q1's: aaaa)")


def test_only_mechanism_members_off_zero_are_below_zero_before_adjustment():
    """Catches a member whose interval holds zero (Q3b) listed as 'below zero before adjustment': only Q3a, below
    zero and not kept by Holm, is; Q3c, kept, reaches the level."""
    rows = [_row(i, cmp, study="confirm_addition", family="mechanism", reject=kept)
            for i, cmp, kept in (("Q3a", BELOW, False), ("Q3b", ACROSS, False), ("Q3c", BELOW, True))]
    text = decision.decision_sentences(_evidence(rows))
    assert "), Q3c reaches the declared level (Q3a below zero before adjustment, not after)." in text, text


def test_rates_chosen_per_method_keep_their_order():
    """Catches SAPO's and GRPO's chosen rates swapped in the words: the committed G3 chose 1e-4 for both, where a
    swap cannot show, so the rates here differ (SAPO 5e-5, GRPO 1e-4)."""
    row = _row("G3's rule at M = 16", ACROSS, 16, rates=(5e-5, 1e-4), rate_rule="dev", declared=False)
    assert row.rate_values() == "SAPO 5e-5, GRPO 1e-4"
    assert row.rate_text() == "lr on dev (SAPO 5e-5, GRPO 1e-4)"
    assert _row("G4d", BELOW, 16, rates=(2e-4, 2e-4)).rate_text() == "lr 2e-4 shared"
