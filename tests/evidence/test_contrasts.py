"""Declared contrasts (sapo_lab.evidence.contrasts): a trend of the paired gap, and a learning-rate tuning arm.

Results folders are written by hand (config.json, metrics.jsonl, study_record.json per run) so each test
knows the answer: which runs share a seed, which config keys differ, and what every slope is.
"""

import json

import pytest

from sapo_lab.evidence.analysis import endpoint_value
from sapo_lab.evidence.contrasts import contrast_results, declared_results, trend_slopes
from sapo_lab.evidence.results import load_study
from sapo_lab.studies.spec import load_declaration

M_OF = {"g2": 2, "s2": 2, "g4": 4, "s4": 4, "g8": 8, "s8": 8, "g8_lo": 8, "s8_lo": 8}
LR_OF = {"g8_lo": 1e-4, "s8_lo": 1e-4}
METHODS = {m: {"loss_type": "grpo" if m.startswith("g") else "sapo", "steps_per_generation": M_OF[m],
               **({"learning_rate": LR_OF[m]} if m in LR_OF else {})} for m in M_OF}
TREND = {"id": "T", "question": "?", "kind": "trend", "test": "paired_t",
         "points": [{"method": f"s{m}", "reference": f"g{m}", "x": x} for m, x in ((2, 1), (4, 2), (8, 3))]}
TUNED = {"id": "L", "question": "?", "kind": "tuned", "test": "paired_t", "tune_on": "final_dev_pass1",
         "arms": {"sapo": ["s8_lo", "s8"], "grpo": ["g8_lo", "g8"]}, "differ_in": ["optimization.learning_rate"]}
PLAN = {
    "declared": "before running", "declared_utc": "2026-12-04",
    "endpoint": {"metric": "final_pass1", "checkpoint": "final", "evaluation": "eval split"},
    "alpha": 0.05,
    "tests": [{"id": "Q", "question": "?", "method": "s8", "reference": "g8", "test": "paired_t"}],
    "contrasts": [TREND, TUNED],
    "exploratory": "the rest",
}


def _declaration(plan=PLAN):
    return {"name": "c", "description": "x", "methods": METHODS, "seeds": [0, 1, 2], "budget": {"max_steps": 3},
            "collapse": [{"metric": "entropy", "kind": "below", "threshold": 0.01}], "analysis": plan}


def _run(root, method, seed, final, dev):
    d = root / "c" / "runs" / f"{method}_seed{seed}"
    d.mkdir(parents=True)
    cfg = {"seed": seed, "cold_start": {"cache_dir": "x"}, "loss": {"loss_type": METHODS[method]["loss_type"]},
           "optimization": {"steps_per_generation": M_OF[method], "learning_rate": LR_OF.get(method, 2e-4)}}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "metrics.jsonl").write_text(json.dumps({"step": 1, "m": method, "seed": seed}) + "\n")
    record = {"run_id": d.name, "method": method, "seed": seed, "grid": {}, "final_pass1": final,
              "selections": [{"by": "final", "step": 3, "dev_pass1": dev}]}
    (d / "study_record.json").write_text(json.dumps(record))


def _study(tmp_path, values, plan=PLAN):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "study.json").write_text(json.dumps(_declaration(plan)))
    for method, per_seed in values.items():
        for seed, (final, dev) in per_seed.items():
            _run(tmp_path, method, seed, final, dev)
    return load_study("c", tmp_path)


# GRPO at 0.6 everywhere; SAPO's gap per seed at M = 2, 4, 8, so every seed's slope is known by hand
GAPS = {0: (-0.30, -0.20, -0.10), 1: (-0.20, -0.20, -0.20), 2: (-0.10, -0.15, -0.30)}


def _values():
    v = {m: {} for m in METHODS}
    for seed, gaps in GAPS.items():
        for m, g in zip((2, 4, 8), gaps, strict=True):
            v[f"g{m}"][seed] = (0.6, 0.5)
            v[f"s{m}"][seed] = (0.6 + g, 0.5)
        v["g8_lo"][seed] = (0.2 + 0.1 * seed, 0.9)  # best grpo setting on dev, poor on eval
        v["s8_lo"][seed] = (0.7, 0.1)  # best sapo setting on eval, worst on dev
    return v


def test_trend_slope_per_seed_and_tuned_arm_pairs_across_learning_rates(tmp_path):
    res = {r["id"]: r for r in declared_results(_study(tmp_path, _values()))}
    assert list(res) == ["Q", "T", "L"]  # tests first, then contrasts, each in declared order
    # slopes over x = 1, 2, 3: (g3 - g1) / 2 per seed -> 0.10, 0.00, -0.10 (a pooled slope would be 0 too,
    # but its per-seed differences would not be these)
    assert res["T"]["comparison"].differences == pytest.approx([0.10, 0.0, -0.10])
    assert res["T"]["p"] == pytest.approx(1.0)
    assert [g["mean_gap"] for g in res["T"]["gaps"]] == pytest.approx([-0.2, -0.55 / 3, -0.2])
    # tuned on dev, never eval: sapo keeps 2e-4 (s8), grpo takes 1e-4 (g8_lo); paired by seed across the two rates
    assert res["L"]["chosen"] == {"sapo": "s8", "grpo": "g8_lo"}
    assert res["L"]["comparison"].differences == pytest.approx([0.5 - 0.2, 0.4 - 0.3, 0.3 - 0.4])
    assert res["L"]["reject"] is False and res["L"]["p_adjusted"] == res["L"]["p"]


def test_trend_slopes_by_hand():
    assert trend_slopes({0: [0.0, 1.0, 2.0], 1: [3.0, 3.0, 3.0]}, [1.0, 2.0, 3.0]) == pytest.approx({0: 1.0, 1: 0.0})
    assert trend_slopes({0: [0.0, 1.0, 4.0]}, [0.0, 1.0, 2.0])[0] == pytest.approx(2.0)  # least squares, not end points / 2
    with pytest.raises(ValueError, match="not all equal"):
        trend_slopes({0: [1.0, 2.0]}, [1.0, 1.0])


def test_nothing_is_computed_before_every_declared_seed(tmp_path):
    values = _values()
    del values["s4"][2]
    del values["g8_lo"][1]
    res = {r["id"]: r for r in contrast_results(_study(tmp_path, values))}
    assert res["T"]["status"] == "pending: 2 of 3 pairs finished at x = 2" and res["T"]["comparison"] is None
    assert res["L"]["status"] == "pending: 1 runs of the arms unfinished" and res["L"]["p"] is None


def test_tuned_arm_refuses_pairs_that_differ_outside_the_declared_keys(tmp_path):
    # the grpo setting chosen runs at another M: its runs are not pairs, so the contrast stays pending
    study = _study(tmp_path, _values(), plan={**PLAN, "contrasts": [{**TUNED, "arms": {"s": ["s8"], "g": ["g4"]}}]})
    (res,) = contrast_results(study)
    assert res["status"] == "pending: 0 of 3 pairs finished"


def test_contrasts_block_is_checked(tmp_path):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_declaration()))
    assert len(load_declaration(str(path))["analysis"]["contrasts"]) == 2
    bad = [
        ([{**TREND, "kind": "anova"}], "kind must be"),
        ([{**TREND, "points": TREND["points"][:2]}], "three or more"),
        ([{**TREND, "points": [*TREND["points"][:2], {**TREND["points"][2], "x": 1}]}], "distinct"),
        ([{**TREND, "points": [*TREND["points"][:2], {**TREND["points"][2], "method": "nope"}]}], "not a method"),
        ([{**TUNED, "differ_in": ["learning_rate"]}], "dotted"),
        ([{**TUNED, "arms": {"s": ["s8"], "g": ["g8", "g8_lo"]}}], "same number"),
        ([{**TREND, "id": "Q"}], "unique"),
        ([{**TREND, "test": "welch"}], "paired_t"),
        ("x", "must be a list"),
    ]
    for contrasts, message in bad:
        path.write_text(json.dumps(_declaration({**PLAN, "contrasts": contrasts})))
        with pytest.raises(ValueError, match=message):
            load_declaration(str(path))


def test_a_diverged_run_scores_zero_on_the_final_endpoints_and_stays_paired(tmp_path):
    # the declared rule: no final evaluation, no usable policy; dropping the pair would favour the diverging method
    study = _study(tmp_path, _values())
    run = study.select("s8")[0]
    run.record.update(status="diverged", final_pass1=None, selections=[])
    assert endpoint_value(run, "final_pass1") == 0.0 and endpoint_value(run, "final_dev_pass1") == 0.0
    with pytest.raises(KeyError, match="best_dev_eval_pass1"):
        endpoint_value(run, "best_dev_eval_pass1")  # no selected checkpoint to read
    (q,) = [r for r in declared_results(study) if r["id"] == "Q"]
    assert q["comparison"].differences[0] == pytest.approx(0.0 - 0.6)
    finished = study.select("g8")[0]
    assert endpoint_value(finished, "final_pass1") == pytest.approx(0.6)  # a finished run is read as before
