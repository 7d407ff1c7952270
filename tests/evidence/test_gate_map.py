"""The gate map's reading: which GRPO run each SAPO cell is paired with, when a cell counts, and its sentences."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from sapo_lab.evidence import gate_map
from sapo_lab.evidence.gate_map import Cell, Setting, declared_answers, map_cells, method_settings, where_the_gate_stands
from sapo_lab.evidence.paired import compare
from sapo_lab.evidence.results import load_study
from sapo_lab.studies.spec import load_declaration

ROOT = Path(__file__).resolve().parents[2]
DECLARATION = load_declaration(str(ROOT / "experiments" / "gate_map.json"))


@pytest.fixture(scope="module")
def settings():
    return method_settings(load_study("gate_map", ROOT / "results"))


def _study(declaration=DECLARATION):
    return SimpleNamespace(name="gate_map", declaration=declaration, runs=[], select=lambda *a, **k: [])


def _fake_pairs(monkeypatch, seeds, value):
    """pairs_in_study answering from ``value(method, reference, seed) -> (m, r)`` for ``seeds``."""

    def pairs(study, method, reference, cell=None):
        return [SimpleNamespace(seed=s, method=(method, reference, s, 0), reference=(method, reference, s, 1)) for s in seeds]

    monkeypatch.setattr(gate_map, "pairs_in_study", pairs)
    monkeypatch.setattr(gate_map, "endpoint_value", lambda run, metric: value(*run[:3])[run[3]])


def test_settings_read_the_declared_factors(settings):
    s = settings["sapo_tau_x8.81_lr5e-5_M2"]
    assert (s.loss_type, s.tau_pos, s.tau_neg, s.learning_rate, s.staleness) == ("sapo", 8.81, 9.25, 5e-5, 2)
    assert settings["sapo_lr2e-4_M8"].tau_pos == 1.0  # the paper's default, not a declared override
    assert abs(settings["sapo_tau_x8.81_lr2e-4_M8"].half_width - 0.2) < 1e-3  # as tight as the clip's epsilon
    assert settings["grpo_lr2e-4_M8"].half_width is None


def test_settings_are_what_the_runs_trained_with_not_what_the_declaration_resolves_to():
    """Catches the settings read from the declaration's expansion again: a run whose saved config holds another
    learning rate than the declaration (a declaration edited after the runs, or a default that changed) is
    reported at the rate it trained with; a method with no finished run has no setting yet."""
    saved = {"loss": {"loss_type": "sapo", "sapo_temperature_pos": 3.0, "sapo_temperature_neg": 3.15},
             "optimization": {"learning_rate": 7e-5, "steps_per_generation": 8}}
    runs = {"sapo_tau_x3_lr1e-4_M8": [SimpleNamespace(config=saved)], "grpo_lr1e-4_M8": []}
    study = SimpleNamespace(methods=lambda: list(runs), select=lambda method: runs[method])
    (only,) = method_settings(study).values()
    assert (only.method, only.tau_pos, only.learning_rate, only.staleness) == ("sapo_tau_x3_lr1e-4_M8", 3.0, 7e-5, 8)


def test_each_sapo_cell_is_paired_with_grpo_at_its_own_rate_and_staleness(monkeypatch, settings):
    # the gap encodes whether the reference matched: a cell paired with another M's GRPO reads -1
    def value(method, reference, seed):
        m, r = settings[method], settings[reference]
        same = (m.learning_rate, m.staleness) == (r.learning_rate, r.staleness) and r.loss_type == "grpo"
        return (0.5 + 0.01 * (seed % 3), 0.5) if same else (0.0, 1.0)

    _fake_pairs(monkeypatch, DECLARATION["seeds"], value)
    cells = map_cells(_study(), settings)
    assert len(cells) == 36  # 3 temperatures x 3 rates x 4 M
    assert all(c.comparison is not None and c.comparison.mean > 0 for c in cells)
    # the tests and the trend's points; the tuned contrast adds only its chosen pair, once complete (not here)
    asked = {c.sapo.method for c in cells if c.in_declared_question}
    assert asked == {"sapo_tau_x8.81_lr2e-4_M8", "sapo_tau_x3_lr2e-4_M8"} | {f"sapo_lr2e-4_M{m}" for m in (2, 4, 8, 16)}


def test_a_cell_waits_for_every_declared_seed(monkeypatch, settings):
    _fake_pairs(monkeypatch, DECLARATION["seeds"][:-1], lambda m, r, s: (0.6, 0.5 + 0.01 * s))
    cells = map_cells(_study(), settings)
    assert all(c.comparison is None and c.finished_pairs == 9 for c in cells)
    assert "No cell of the map is complete" in where_the_gate_stands(cells).sentence()


def _cell(gaps, tau=1.0):
    s = Setting("sapo_x", "sapo", tau, tau * 1.05, 2e-4, 8)
    g = Setting("grpo_x", "grpo", 1.0, 1.05, 2e-4, 8)
    cmp = compare({i: (0.5 + d, 0.5) for i, d in enumerate(gaps)}, "sapo_x", "grpo_x")
    return Cell(s, g, len(gaps), len(gaps), False, cmp)


def test_verdicts_follow_the_interval_not_the_mean():
    above = _cell([0.05, 0.06, 0.04, 0.05, 0.07])
    below = _cell([-0.05, -0.06, -0.04, -0.05, -0.07])
    wide = _cell([0.3, -0.2, 0.25, -0.25, 0.1])  # mean above zero, interval across it
    assert (above.verdict, below.verdict, wide.verdict) == ("helps", "hurts", "no difference")
    standing = where_the_gate_stands([above, below, wide])
    text = standing.sentence()
    assert "above zero, in 1 (" in text and "below zero, in 1 (" in text and "holds zero in 1 (" in text
    assert "5 paired seeds" in text  # the seeds come from the cells, not from the prose
    assert "By staleness: M = 8, 1 above, 1 below, 1 holding zero." in text


def test_the_staleness_breakdown_groups_by_m_not_by_another_factor():
    def at(m, gaps, lr):
        s = Setting(f"sapo_M{m}", "sapo", 1.0, 1.05, lr, m)
        g = Setting(f"grpo_M{m}", "grpo", 1.0, 1.05, lr, m)
        cmp = compare({i: (0.5 + d, 0.5) for i, d in enumerate(gaps)}, s.method, g.method)
        return Cell(s, g, len(gaps), len(gaps), False, cmp)

    down = [-0.05, -0.06, -0.04, -0.05, -0.07]
    wide = [0.3, -0.2, 0.25, -0.25, 0.1]
    # the learning rates cross M: grouping by rate (or by the cells' order) gives other counts
    cells = [at(16, down, 1e-4), at(2, wide, 1e-4), at(16, down, 2e-4), at(2, down, 2e-4)]
    standing = where_the_gate_stands(cells)
    assert standing.by_staleness() == {2: (0, 1, 1), 16: (0, 2, 0)}
    assert "M = 2, 0 above, 1 below, 1 holding zero; M = 16, 0 above, 2 below, 0 holding zero" in standing.sentence()


def test_answer_lines_quote_the_adjusted_p_and_the_verdict(monkeypatch):
    cmp = compare({i: (0.4 + 0.01 * i, 0.5) for i in range(10)}, "sapo_tau_x3_lr2e-4_M8", "grpo_lr2e-4_M8")
    entry = {"id": "G2", "family": "tight_gate", "status": "complete", "comparison": cmp, "p": 0.001,
             "p_adjusted": 0.08, "reject": False}
    monkeypatch.setattr(gate_map, "declared_results", lambda study: [entry])
    (line,) = [a["line"] for a in declared_answers(_study())]
    assert "Holm-adjusted p = 0.08" in line and "does not reach" in line  # raw p alone would have said "reaches"
    assert "p = 0.001" in line
    # the interval worked out here: differences -0.10, -0.09, ..., -0.01 have mean -0.055 and standard error
    # 0.0302765 / sqrt(10); t(0.975, 9) = 2.2621572 (catches a z interval, a 90% level or the mean left out)
    half = 2.2621572 * 0.0302765 / 10 ** 0.5
    assert f"\u22120.055 [\u2212{0.055 + half:.3f}, \u2212{0.055 - half:.3f}]" in line


def _entry(test_id, gaps, **extra):
    cmp = compare({i: (0.5 + g, 0.5) for i, g in enumerate(gaps)}, "m", "r")
    return {"id": test_id, "comparison": cmp, "p": cmp.t_p, "p_adjusted": cmp.t_p, "reject": cmp.t_p < 0.05, **extra}


BELOW = [-0.1 + 0.01 * i for i in range(10)]
ABOVE = [-g for g in BELOW]
ACROSS = [0.05 if i % 2 else -0.04 for i in range(10)]
G1 = {"method": "sapo_tau_x8.81_lr2e-4_M8", "reference": "grpo_lr2e-4_M8"}
G5 = {"kind": "trend", "points": [{"method": f"sapo_lr2e-4_M{m}", "reference": f"grpo_lr2e-4_M{m}", "x": x}
                                  for x, m in enumerate((2, 4, 8, 16), start=1)]}


def _bullets(monkeypatch, settings, entries):
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: entries)
    return gate_map.answer_bullets(_study(), settings).splitlines()


def test_answer_bullets_read_the_side_from_the_interval(monkeypatch, settings):
    below, above, across = _bullets(monkeypatch, settings, [
        _entry("G1", BELOW, **G1), _entry("G2", ABOVE, **G1), _entry("G4a", ACROSS, **G1)])
    assert "SAPO below GRPO" in below and "reaches the declared level" in below and "does not" not in below
    assert "SAPO above GRPO" in above
    assert "no difference detected" in across and "does not reach" in across
    assert "τ 8.81 against GRPO, lr 0.0002, M = 8" in below  # the topic comes from the declared settings


def test_trend_bullets_say_which_way_the_gap_moves(monkeypatch, settings):
    falls, rises, flat = _bullets(monkeypatch, settings, [
        _entry("G5", BELOW, **G5), _entry("G5", ABOVE, **G5), _entry("G5", ACROSS, **G5)])
    assert "falls as M grows" in falls and "rises as M grows" in rises and "no trend" in flat
    assert "per doubling of M" in falls  # the declared x is log2 M


def test_a_side_that_holm_does_not_keep_says_so(monkeypatch, settings):
    entry = _entry("G2", BELOW, family="tight_gate", **G1)
    entry.update(p_adjusted=0.09, reject=False)
    (line,) = _bullets(monkeypatch, settings, [entry])
    assert "SAPO below GRPO before Holm's adjustment" in line and "does not reach" in line


def test_a_family_member_holding_zero_is_not_said_to_lose_a_side_to_holm(monkeypatch, settings):
    # catches: "before Holm's adjustment" added to an interval holding zero (the side test dropped): a family member
    # whose interval crosses zero has no side to lose; only one below zero that Holm does not keep gets the words
    across = _entry("G4a", ACROSS, family="staleness", **G1)
    across.update(p_adjusted=0.9, reject=False)
    (line,) = _bullets(monkeypatch, settings, [across])
    assert "no difference detected, Holm-adjusted p = 0.9; does not reach the declared level." in line
    assert "before Holm" not in line


def test_pending_questions_say_so(monkeypatch, settings):
    (line,) = _bullets(monkeypatch, settings, [{"id": "G5", "status": "pending: 3 of 10", "comparison": None, **G5}])
    assert "not yet complete (pending: 3 of 10)" in line


def test_a_family_is_adjusted_only_when_complete():
    # Holm over the finished half of a family would divide alpha by 2, not 4: G4c alone at p 0.03 must wait
    from sapo_lab.evidence.analysis import adjust_families

    family = [{"id": f"G4{x}", "family": "staleness", "p": p} for x, p in zip("abcd", (None, None, 0.03, None), strict=True)]
    lone = {"id": "G3", "p": 0.03}
    adjust_families([*family, lone], 0.05)
    assert family[2]["reject"] is None and family[2]["waiting_for"] == ["G4a", "G4b", "G4d"]
    assert lone["reject"] is True  # a question outside any family is read at its raw p
    done = [{"id": f"G4{x}", "family": "staleness", "p": p} for x, p in zip("abcd", (0.5, 0.4, 0.03, 0.2), strict=True)]
    adjust_families(done, 0.05)
    assert done[2]["p_adjusted"] == pytest.approx(0.12) and done[2]["reject"] is False  # 4 x 0.03


def test_bullets_say_when_a_family_waits(monkeypatch, settings):
    entry = _entry("G4c", BELOW, family="staleness", **G1)
    entry.update(p_adjusted=None, reject=None, waiting_for=["G4a"])
    (bullet,) = _bullets(monkeypatch, settings, [entry])
    assert "waits for G4a" in bullet and "reaches" not in bullet


def _declared(g1, g4, g5, g3, rates=("1e-4", "1e-4")):
    """Fake answers in the declaration's shape: G1 at the tight gate, G4a-d at M 2-16, G5 the trend, G3 tuned."""
    out = [_entry("G1", g1, method="sapo_tau_x8.81_lr2e-4_M8", reference="grpo_lr2e-4_M8")]
    for x, m in zip("abcd", (2, 4, 8, 16), strict=True):
        e = _entry(f"G4{x}", g4[m], family="staleness", method=f"sapo_lr2e-4_M{m}", reference=f"grpo_lr2e-4_M{m}")
        out.append(e)
    out.append(_entry("G5", g5, **G5))
    tuned = _entry("G3", g3, kind="tuned")
    tuned["comparison"].method, tuned["comparison"].reference = f"sapo_lr{rates[0]}_M8", f"grpo_lr{rates[1]}_M8"
    return out + [tuned]


def test_plain_answer_follows_each_interval(monkeypatch, settings):
    entries = _declared(BELOW, {2: ACROSS, 4: BELOW, 8: BELOW, 16: BELOW}, BELOW, BELOW)
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: entries)
    text = gate_map.plain_answer(_study(), settings)
    assert text.startswith("In no declared comparison did SAPO finish above GRPO.")
    assert "SAPO − GRPO falls as M grows" in text and "at M = 2 no difference was detected" in text
    assert "narrow as the clip left SAPO below GRPO" in text and "(both chose 0.0001) left SAPO below" in text
    # a narrow gate that closes the gap, a flat trend, SAPO above somewhere, different tuned rates
    entries = _declared(ACROSS, {2: ABOVE, 4: ACROSS, 8: ACROSS, 16: ACROSS}, ACROSS, BELOW, ("2e-4", "5e-5"))
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: entries)
    text = gate_map.plain_answer(_study(), settings)
    assert text.startswith("SAPO finished above GRPO in G4a.")
    assert "No trend detected" in text and "narrow as the clip left no detectable gap" in text
    assert "SAPO chose 0.0002, GRPO 5e-05" in text


def test_plain_answer_names_the_trend_scope_and_the_answers_holm_does_not_keep(monkeypatch, settings):
    entries = _declared(BELOW, {2: ACROSS, 4: BELOW, 8: BELOW, 16: BELOW}, BELOW, BELOW)
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: entries)
    text = gate_map.plain_answer(_study(), settings)
    assert "falls as M grows at lr 2e-4 and τ 1, over M = 2 to 16" in text  # the trend's points, not every rate
    assert "before Holm's adjustment, not after" not in text  # every member below zero kept its level here
    for e in entries:
        if e["id"] in ("G4b", "G4c"):  # below zero on the raw test, not after the family's adjustment
            e["reject"] = False
    text = gate_map.plain_answer(_study(), settings)
    assert "at M = 4, 8 the gap lies on one side of zero before Holm's adjustment, not after" in text
    assert "at M = 16 the gap reaches the declared level" in text


def test_plain_answer_waits_for_every_question(monkeypatch, settings):
    entries = _declared(BELOW, {2: ACROSS, 4: BELOW, 8: BELOW, 16: BELOW}, BELOW, BELOW)
    entries[-1] = {**entries[-1], "comparison": None}
    monkeypatch.setattr(gate_map, "declared_answers", lambda study: entries)
    assert gate_map.plain_answer(_study(), settings) == "The declared answer waits for G3."


def test_a_cells_reading_says_where_its_interval_lies_and_a_declared_cells_level():
    # catches the map's table reading declared cells as "hurts" (more than an interval shows), a declared cell's
    # level taken from its raw p instead of Holm's decision, and an exploratory cell given a level at all
    from sapo_lab.evidence.gate_map import Cell, Setting, cell_reading
    from sapo_lab.evidence.paired import compare

    s, g = Setting("sapo_m4", "sapo", 1.0, 1.05, 2e-4, 4), Setting("grpo_m4", "grpo", 1.0, 1.05, 2e-4, 4)
    below = compare({i: (0.5 - 0.03 - 0.001 * i, 0.5) for i in range(10)}, "sapo_m4", "grpo_m4")
    cell = Cell(s, g, 10, 10, True, below)
    late = {"id": "G4b", "comparison": below, "family": "staleness", "reject": False, "p": below.t_p}
    assert cell_reading(cell, [late]) == "declared (G4b): below zero before Holm's adjustment, not after"
    assert cell_reading(cell, [{**late, "reject": True}]) == "declared (G4b): below zero, at the declared level"
    assert cell_reading(cell, []) == "exploratory: below zero"
    for words in ("helps", "hurts"):
        assert words not in cell_reading(cell, [late])
    assert cell_reading(Cell(s, g, 10, 3, False, None), [late]) == ""
