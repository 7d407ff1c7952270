"""The gate map's exploratory readings, each recomputed here from the run files with json and numpy."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from sapo_lab.evidence import exploratory
from sapo_lab.evidence.contrasts import contrast_results
from sapo_lab.evidence.gate_map import method_settings
from sapo_lab.evidence.results import load_study

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "results" / "gate_map" / "runs"


@pytest.fixture(scope="module")
def study():
    return load_study("gate_map")


@pytest.fixture(scope="module")
def settings(study):
    return method_settings(study)


def _record(run_id):
    return json.loads((RUNS / run_id / "study_record.json").read_text())


def _selection(run_id, by, field):
    (sel,) = [s for s in _record(run_id)["selections"] if s["by"] == by]
    return sel["eval"]["weighted"]["pass1"] if field == "eval" else sel[field]


def _interval(diffs):
    d = np.asarray(diffs)
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean() - half, d.mean() + half


def test_collapse_counts_are_the_records_flags(study, settings):
    # fails if a flag were read from another field (the criterion, a step) or a method's runs were miscounted
    by_loss = {"sapo": [0, 0], "grpo": [0, 0]}
    for path in RUNS.iterdir():
        rec = _record(path.name)
        row = by_loss[json.loads((path / "config.json").read_text())["loss"]["loss_type"]]
        row[0] += bool(rec["collapse"]["collapsed"])
        row[1] += 1
    assert exploratory.collapse_counts(study).by_loss(settings) == {k: tuple(v) for k, v in by_loss.items()}


def test_the_tuned_rule_at_the_declared_m_is_the_declared_answer(study, settings):
    # fails if the rule moved to other M chose differently from the declared contrast (another tie rule, metric)
    (declared,) = [r for r in contrast_results(study) if r["kind"] == "tuned"]
    (at_8,) = [t for t in exploratory.tuned_by_staleness(study, settings) if t.declared]
    assert at_8.picks == declared["chosen"] and at_8.comparison.t_interval == declared["comparison"].t_interval


def test_the_tuned_rule_at_m16_recomputed(study, settings):
    # the picks from seed-mean final dev Pass@1 by hand, then the eval gap: fails on a pick made on eval
    seeds = study.declaration["seeds"]

    def dev(method):
        return np.mean([_selection(f"{method}_seed{s}", "final", "dev_pass1") for s in seeds])

    picks = {arm: max(("2e-4", "1e-4", "5e-5"), key=lambda lr, a=arm: dev(f"{a}_lr{lr}_M16")) for arm in ("sapo", "grpo")}
    diffs = [_record(f"sapo_lr{picks['sapo']}_M16_seed{s}")["final_pass1"]
             - _record(f"grpo_lr{picks['grpo']}_M16_seed{s}")["final_pass1"] for s in seeds]
    (at_16,) = [t for t in exploratory.tuned_by_staleness(study, settings) if t.staleness == 16]
    assert at_16.picks == {arm: f"{arm}_lr{lr}_M16" for arm, lr in picks.items()} and not at_16.declared
    assert at_16.comparison.t_interval == pytest.approx(_interval(diffs), abs=1e-12)


def test_the_declared_slope_and_a_shorter_one_recomputed(study, settings):
    # per seed np.polyfit on log2 M: fails if the slope pooled seeds, used M instead of log2 M, or ignored `staleness`
    seeds = study.declaration["seeds"]
    for ms, declared in (((2, 4, 8, 16), True), ((2, 4, 8), False)):
        slopes = [np.polyfit(np.log2(ms), [_record(f"sapo_lr2e-4_M{m}_seed{s}")["final_pass1"]
                                           - _record(f"grpo_lr2e-4_M{m}_seed{s}")["final_pass1"] for m in ms], 1)[0]
                  for s in seeds]
        got = exploratory.slope_at(study, settings, learning_rate=2e-4, staleness=ms)
        assert got.declared is declared and got.comparison.t_interval == pytest.approx(_interval(slopes), abs=1e-12)


def test_a_slopes_largest_gap_is_the_largest_absolute_cell_mean_recomputed(study, settings):
    # catches: the slope's largest gap without abs() (at lr 2e-4 every cell's mean gap is negative, so the plain
    # maximum would be the gap nearest zero); recomputed from the records, as the largest |mean SAPO - GRPO|
    seeds = study.declaration["seeds"]
    ms = (2, 4, 8, 16)
    means = [np.mean([_record(f"sapo_lr2e-4_M{m}_seed{s}")["final_pass1"]
                      - _record(f"grpo_lr2e-4_M{m}_seed{s}")["final_pass1"] for s in seeds]) for m in ms]
    assert min(means) < 0 and max(means, key=abs) < 0   # the committed gaps this test relies on
    got = exploratory.slope_at(study, settings, learning_rate=2e-4, staleness=ms)
    assert got.largest_gap == pytest.approx(max(abs(g) for g in means), abs=1e-12)


def test_a_slope_needs_three_complete_cells(study, settings):
    with pytest.raises(ValueError, match="three or more complete cells"):
        exploratory.slope_at(study, settings, learning_rate=2e-4, staleness=(2, 4))


def test_the_closer_pick_margin_recomputed(study):
    # GRPO's pick against its runner-up on final dev, paired by seed; fails on an unpaired SE or the wrong runner-up
    seeds = study.declaration["seeds"]
    margins = exploratory.pick_margins(study)
    grpo = margins["grpo"]
    diffs = [_selection(f"{grpo.pick}_seed{s}", "final", "dev_pass1")
             - _selection(f"{grpo.runner_up}_seed{s}", "final", "dev_pass1") for s in seeds]
    assert grpo.margin == pytest.approx(np.mean(diffs), abs=1e-12)
    assert grpo.standard_error == pytest.approx(np.std(diffs, ddof=1) / math.sqrt(len(diffs)), abs=1e-12)
    other = [_record(f"{margins['sapo'].pick}_seed{s}")["final_pass1"]
             - _record(f"{grpo.runner_up}_seed{s}")["final_pass1"] for s in seeds]
    assert grpo.with_runner_up.t_interval == pytest.approx(_interval(other), abs=1e-12)


def test_best_dev_standing_reads_the_best_dev_checkpoint(study, settings):
    # fails if the best-dev reading fell back to the final endpoint (the two differ in this map)
    standing = exploratory.best_dev_standing(study, settings)
    seeds = study.declaration["seeds"]
    counts = [0, 0, 0]
    for c in standing.helps + standing.hurts + standing.no_difference:
        lo, hi = _interval([_selection(f"{c.sapo.method}_seed{s}", "best_dev", "eval")
                            - _selection(f"{c.grpo.method}_seed{s}", "best_dev", "eval") for s in seeds])
        counts[0 if lo > 0 else 1 if hi < 0 else 2] += 1
    assert counts == [len(standing.helps), len(standing.hurts), len(standing.no_difference)]


def test_leaders_rank_seed_means(study, settings):
    means = {}
    for path in RUNS.iterdir():
        means.setdefault(_record(path.name)["method"], []).append(_record(path.name)["final_pass1"])
    ranked = sorted(means, key=lambda m: np.mean(means[m]), reverse=True)
    assert [m for m, _ in exploratory.leaders(study)] == ranked
    loss, run = exploratory.leading_loss(study, settings)
    assert all(settings[m].loss_type == loss for m in ranked[:run]) and settings[ranked[run]].loss_type != loss


def test_provenance_recomputed_from_the_environment_record(study):
    # fails if an invocation that only skipped finished runs counted as training, or a resumed run were missed
    invocations = json.loads((ROOT / "results" / "gate_map" / "environment.json").read_text())["invocations"]
    training = [i for i in invocations if {"started", "resumed"} & set((i.get("actions") or {}).values())]
    resumed = sorted(p.name for p in RUNS.iterdir()
                     if any(e["action"] == "resumed" for e in json.loads((p / "study_wall.json").read_text())))
    got = exploratory.provenance(study)
    assert (got.invocations, got.training_invocations) == (len(invocations), len(training))
    assert got.dirty_training_invocations == sum(i["git_dirty"] for i in training)
    assert got.resumed_runs == resumed
    accounted = {r for i in training for r, a in i["actions"].items() if a in ("started", "resumed")}
    assert len(got.unrecorded_runs) == len({p.name for p in RUNS.iterdir()} - accounted)
    text = got.sentence()
    assert f"{got.dirty_training_invocations} of those ran from a tree with uncommitted" in text


def test_an_invocation_that_only_resumed_runs_counts_as_training():
    # catches: a resumed invocation not counted as training (only "started" read): the committed record has no
    # invocation that resumed without also starting a run, so this one is planted. The second invocation only
    # resumes r2 and r3, from a dirty tree; the third skips everything.
    from types import SimpleNamespace

    invocations = [{"actions": {"r1": "started", "r2": "started"}, "git_commit": "aaaaaaa111", "git_dirty": False},
                   {"actions": {"r1": "skipped", "r2": "resumed", "r3": "resumed"}, "git_commit": "bbbbbbb222",
                    "git_dirty": True},
                   {"actions": {"r1": "skipped", "r2": "skipped", "r3": "skipped"}, "git_commit": "ccccccc333",
                    "git_dirty": True}]
    walls = {"r1": [{"action": "started"}], "r2": [{"action": "started"}, {"action": "resumed"}],
             "r3": [{"action": "resumed"}]}
    study = SimpleNamespace(environment={"invocations": invocations},
                            runs=[SimpleNamespace(run_id=r) for r in walls],
                            folder=SimpleNamespace(run=lambda r: SimpleNamespace(read_wall=lambda: walls[r])))
    got = exploratory.provenance(study)
    assert got == exploratory.Provenance(3, 2, 1, ["aaaaaaa", "bbbbbbb+"], ["r2", "r3"], [], 3)


def test_provenance_sentence_follows_its_counts():
    clean = exploratory.Provenance(3, 2, 0, ["abc1234"], [], [], 20)
    text = clean.sentence()
    assert "No run was resumed" in text and "every one of the 20 runs was trained by a recorded invocation" in text
    gap = exploratory.Provenance(3, 2, 1, ["abc1234+"], ["r1"], ["r2", "r3"], 20).sentence()
    assert "1 run was resumed" in gap and "2 of the 20 runs" in gap and "(r1)" in gap
