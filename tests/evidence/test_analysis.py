"""Declared analyses: the study's analysis block is validated and frozen; pairs are found by config.

The results folders here are written by hand (config.json, metrics.jsonl, study_record.json per
run), so each test controls exactly which runs share a seed, a config and a trajectory.
"""

import json

import pytest

from sapo_lab.evidence.analysis import cold_start_means, endpoint_value, matched_pairs, pairs_in_study, primary_results
from sapo_lab.evidence.endpoints import RECORD_ENDPOINTS, SELECTION_FIELDS, endpoint_names
from sapo_lab.evidence.results import load_study
from sapo_lab.studies.runner import run_study
from sapo_lab.studies.spec import load_declaration

PLAN = {
    "declared": "before running",
    "declared_utc": "2026-12-03",
    "endpoint": {"metric": "final_pass1", "checkpoint": "final", "evaluation": "eval split, 4 samples"},
    "alpha": 0.05,
    "tests": [
        {"id": "Q1", "question": "?", "method": "sapo", "reference": "grpo", "cell": {}, "test": "paired_t"},
        {"id": "Q3a", "question": "?", "method": "sapo", "reference": "dir", "cell": {}, "test": "paired_t", "family": "m"},
        {"id": "Q3b", "question": "?", "method": "dir", "reference": "grpo", "cell": {}, "test": "paired_t", "family": "m"},
    ],
    "tuning": [
        {"id": "Q4", "question": "?", "arms": {"sapo": ["sapo", "sapo_x2"], "grpo": ["grpo", "grpo_e1"]},
         "tune_on": "final_dev_pass1", "test": "paired_t"},
    ],
    "exploratory": "everything else",
}
METHODS = {
    "sapo": {"loss_type": "sapo"},
    "grpo": {"loss_type": "grpo"},
    "dir": {"loss_type": "sapo_directional"},
    "sapo_x2": {"loss_type": "sapo", "sapo_temperature_pos": 2.0},
    "grpo_e1": {"loss_type": "grpo", "epsilon": 0.1},
}
CONFIG = {"seed": 0, "optimization": {"steps_per_generation": 8}, "evaluation": {"num_samples": 4},
          "cold_start": {"cache_dir": "x"}}


def _declaration(**extra):
    return {
        "name": "s", "description": "Estimate", "methods": METHODS, "seeds": [0, 1, 2],
        "budget": {"max_steps": 3}, "collapse": [{"metric": "entropy", "kind": "below", "threshold": 0.01}],
        "analysis": PLAN, **extra,
    }


def _write(tmp_path, name, decl):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(decl))
    return str(p)


def test_analysis_block_is_checked(tmp_path):
    # each bad plan a user could write is a one-line error naming the problem, not a later KeyError
    assert load_declaration(_write(tmp_path, "ok", _declaration()))["analysis"]["alpha"] == 0.05
    bad = [
        ({**PLAN, "declared": "yesterday"}, "declared"),
        ({**PLAN, "alpha": 5}, "alpha"),
        ({**PLAN, "endpoint": {"metric": "final_pass1"}}, "endpoint"),
        ({**PLAN, "tests": [{**PLAN["tests"][0], "method": "nope"}]}, "not a method"),
        ({**PLAN, "tests": [{**PLAN["tests"][0], "test": "welch"}]}, "test 'welch' is not a name"),
        ({**PLAN, "tests": [{**PLAN["tests"][0], "cell": {"learning_rate": 1}}]}, "not a grid key"),
        ({**PLAN, "tests": PLAN["tests"][:1] * 2}, "unique"),
        ({**PLAN, "tuning": [{**PLAN["tuning"][0], "arms": {"sapo": ["sapo"], "grpo": ["grpo", "grpo_e1"]}}]}, "same number"),
        ({**PLAN, "primary": []}, "unknown analysis key"),
    ]
    for plan, message in bad:
        with pytest.raises(ValueError, match=message):
            load_declaration(_write(tmp_path, "bad", _declaration(analysis=plan)))


TUNED_CONTRAST = {"id": "L", "question": "?", "kind": "tuned", "test": "paired_t", "tune_on": "final_dev_pass1",
                  "arms": {"sapo": ["sapo", "sapo_x2"], "grpo": ["grpo", "grpo_e1"]},
                  "differ_in": ["optimization.learning_rate"]}


@pytest.mark.parametrize("plan, selection, wrong, nearest", [
    ({**PLAN, "endpoint": {**PLAN["endpoint"], "metric": "final_pas1"}}, None, "final_pas1", "final_pass1"),
    ({**PLAN, "tuning": [{**PLAN["tuning"][0], "tune_on": "final_dev_pas1"}]}, None, "final_dev_pas1", "final_dev_pass1"),
    ({**PLAN, "tests": [{**PLAN["tests"][0], "test": "paired-t"}]}, None, "paired-t", "paired_t"),
    ({**PLAN, "tuning": [{**PLAN["tuning"][0], "test": "paired"}]}, None, "paired", "paired_t"),
    ({**PLAN, "contrasts": [{**TUNED_CONTRAST, "tune_on": "final_devpass1"}]}, None, "final_devpass1", "final_dev_pass1"),
    ({**PLAN, "contrasts": [{**TUNED_CONTRAST, "test": "paired_tt"}]}, None, "paired_tt", "paired_t"),
    # a checkpoint the study does not select: best_dev's endpoints exist only where best_dev is declared
    ({**PLAN, "endpoint": {**PLAN["endpoint"], "metric": "best_dev_eval_pass1"}}, [{"by": "final"}],
     "best_dev_eval_pass1", "final_eval_pass1"),
])
def test_a_misspelt_endpoint_is_refused_at_declaration(tmp_path, plan, selection, wrong, nearest):
    """Catches a free-string endpoint, tuning key or test accepted when the study is declared and failing only
    when its results are read (hours later): one line, naming the nearest name this study can use."""
    extra = {"selection": selection} if selection else {}
    with pytest.raises(ValueError) as refused:
        load_declaration(_write(tmp_path, "typo", _declaration(analysis=plan, **extra)))
    message = str(refused.value)
    assert f"{wrong!r} is not a name this study can use; did you mean {nearest!r}?" in message
    assert "\n" not in message


def test_every_name_in_the_table_is_read_from_a_run():
    """Catches the vocabulary and the reader drifting apart: a name the declaration accepts that
    endpoint_value cannot read back from a finished run's record."""
    rules = [{"by": "best_dev"}, {"by": "final"}, {"by": "step", "value": 50}]
    selections = [{"by": r["by"], "step": 7, "dev_pass1": 0.5, "eval": {"weighted": {"pass1": 0.25}}} for r in rules]
    record = {**{name: 1.0 for name in RECORD_ENDPOINTS}, "selections": selections}
    run = type("Run", (), {"record": record, "run_id": "r"})()
    names = endpoint_names(rules)
    assert len(names) == len(RECORD_ENDPOINTS) + len(rules) * len(SELECTION_FIELDS)
    assert {name: endpoint_value(run, name) for name in names if name.endswith("eval_pass1")} == {
        "best_dev_eval_pass1": 0.25, "final_eval_pass1": 0.25, "step_eval_pass1": 0.25}
    assert all(isinstance(endpoint_value(run, name), float) for name in names)


def _fake_run(root, study, method, seed, final, dev, loss_type, metrics_seed=None, **loss):
    run_id = f"{method}_seed{seed}"
    d = root / study / "runs" / run_id
    d.mkdir(parents=True)
    cfg = {**CONFIG, "seed": seed, "loss": {"loss_type": loss_type, **loss}}
    (d / "config.json").write_text(json.dumps(cfg))
    tag = seed if metrics_seed is None else metrics_seed
    (d / "metrics.jsonl").write_text(json.dumps({"step": 1, "losses/loss": final, "seed": tag, "time/elapsed_s": seed}) + "\n")
    record = {"run_id": run_id, "method": method, "seed": seed, "grid": {}, "final_pass1": final,
              "selections": [{"by": "final", "step": 100, "dev_pass1": dev}]}
    (d / "study_record.json").write_text(json.dumps(record))


def _fake_study(root, name, values, plan=PLAN):
    (root / name).mkdir(parents=True)
    (root / name / "study.json").write_text(json.dumps({**_declaration(analysis=plan), "name": name}))
    for method, per_seed in values.items():
        for seed, (final, dev) in per_seed.items():
            lt = METHODS[method]["loss_type"]
            extra = {k: v for k, v in METHODS[method].items() if k != "loss_type"}
            _fake_run(root, name, method, seed, final, dev, lt, **extra)


def test_primary_results_pairs_by_seed_tunes_on_dev_and_adjusts_families(tmp_path):
    values = {
        "sapo": {0: (0.50, 0.6), 1: (0.40, 0.6), 2: (0.60, 0.6)},
        "grpo": {0: (0.60, 0.5), 1: (0.55, 0.5), 2: (0.70, 0.5)},
        "dir": {0: (0.58, 0.5), 1: (0.50, 0.5), 2: (0.69, 0.5)},
        "sapo_x2": {0: (0.90, 0.1), 1: (0.90, 0.1), 2: (0.90, 0.1)},  # best on eval, worst on dev
        "grpo_e1": {0: (0.10, 0.9), 1: (0.20, 0.9), 2: (0.15, 0.9)},  # worst on eval, best on dev
    }
    _fake_study(tmp_path, "s", values)
    res = {r["id"]: r for r in primary_results(load_study("s", tmp_path))}
    # paired by seed: SAPO - GRPO = -0.10, -0.15, -0.10 (pairing the wrong seeds would change these)
    assert res["Q1"]["comparison"].differences == pytest.approx([-0.10, -0.15, -0.10])
    assert res["Q1"]["comparison"].below == 3
    # tuning reads dev, never eval: choosing on eval would pick sapo_x2 and grpo
    assert res["Q4"]["chosen"] == {"sapo": "sapo", "grpo": "grpo_e1"}
    assert res["Q4"]["comparison"].differences == pytest.approx([0.40, 0.20, 0.45])
    # Holm within the declared family only: Q1 keeps its raw p
    assert res["Q1"]["p_adjusted"] == res["Q1"]["p"]
    fam = sorted((res["Q3a"]["p"], res["Q3b"]["p"]))
    assert max(res["Q3a"]["p_adjusted"], res["Q3b"]["p_adjusted"]) == pytest.approx(max(2 * fam[0], fam[1]))


def test_primary_results_wait_for_every_declared_seed(tmp_path):
    # a test computed on the first finished seeds would let a reader stop when the answer looks good
    values = {m: {0: (0.5, 0.5), 1: (0.4, 0.5)} for m in METHODS}
    values["sapo"][2] = (0.3, 0.5)
    _fake_study(tmp_path, "s", values)
    res = {r["id"]: r for r in primary_results(load_study("s", tmp_path))}
    assert res["Q1"]["status"] == "pending: 2 of 3 pairs finished" and res["Q1"]["comparison"] is None
    assert res["Q4"]["status"].startswith("pending: 3 runs") and res["Q4"]["p"] is None


def test_matched_pairs_count_a_shared_trajectory_once(tmp_path):
    # the same runs copied into a second study (same configs, same metrics) are one pair, not two;
    # a run whose config differs outside the loss section (another M) pairs with nothing
    for name in ("a", "b"):
        _fake_study(tmp_path, name, {"sapo": {0: (0.5, 0.5)}, "grpo": {0: (0.6, 0.5)}})
    _fake_run(tmp_path, "b", "sapo", 7, 0.3, 0.5, "sapo")
    cfg = json.loads((tmp_path / "b/runs/sapo_seed7/config.json").read_text())
    cfg["optimization"]["steps_per_generation"] = 16
    (tmp_path / "b/runs/sapo_seed7/config.json").write_text(json.dumps(cfg))
    _fake_run(tmp_path, "b", "grpo", 7, 0.4, 0.5, "grpo")
    studies = [load_study(n, tmp_path) for n in ("a", "b")]
    kept, dropped = matched_pairs(studies, lambda c: c["loss"]["loss_type"] == "sapo",
                                  lambda c: c["loss"]["loss_type"] == "grpo")
    assert [(p.seed, round(p.difference("final_pass1"), 6)) for p in kept] == [(0, -0.1)]
    assert len(dropped) == 3  # a+a kept; a+b, b+a, b+b are the same trajectory pair
    assert pairs_in_study(studies[1], "sapo", "grpo") and all(p.seed == 0 for p in pairs_in_study(studies[1], "sapo", "grpo"))


def test_declared_plan_is_frozen_once_run_and_methods_filter(tmp_path):
    # a plan may be added post hoc to a study run without one, but never changed afterwards;
    # --methods runs only the named methods and rejects an unknown one
    decl = {**_declaration(), "methods": {"sapo": {"loss_type": "sapo"}}, "seeds": [0]}
    decl.pop("analysis")
    out = tmp_path / "results" / "s"
    out.mkdir(parents=True)
    (out / "study.json").write_text(json.dumps(load_declaration(_write(tmp_path, "s", decl))))  # as the runner saved it
    plan = {**PLAN, "declared": "post hoc",
            "tests": [{**PLAN["tests"][0], "method": "sapo", "reference": "sapo"}], "tuning": []}
    path = _write(tmp_path, "s", {**decl, "analysis": plan})
    with pytest.raises(ValueError, match="not a method of study"):
        run_study(path, str(tmp_path / "results"), methods=["grpo"])
    res = run_study(path, str(tmp_path / "results"), methods=[], log=lambda m: None)  # runs nothing
    assert res["actions"] == {} and res["rows"] == []
    assert "analysis" in json.loads((out / "study.json").read_text())  # the post hoc plan was accepted and saved
    changed = _write(tmp_path, "s", {**decl, "analysis": {**plan, "alpha": 0.01}})
    with pytest.raises(ValueError, match="different declaration"):
        run_study(changed, str(tmp_path / "results"), methods=["sapo"])


def test_cold_start_means_count_each_start_once():
    # the committed stale SAPO-GRPO pairs: 21 pairs from 9 cold starts; grouping by seed (3 groups) or not
    # grouping at all (21) are the plausible mistakes
    names = ["main_comparison", "staleness", "staleness_long", "equal_search_budget", "negative_tokens",
             "cost_of_conservatism", "suite_mix"]
    studies = [load_study(n) for n in names]
    pairs, _ = matched_pairs(
        studies,
        lambda c: c["loss"]["loss_type"] == "sapo" and c["loss"]["sapo_temperature_neg"] == 1.05,
        lambda c: c["loss"]["loss_type"] == "grpo" and c["loss"]["epsilon"] == 0.2,
        where=lambda c: c["optimization"]["steps_per_generation"] > 1,
    )
    means = cold_start_means(pairs, "final_pass1")
    assert len(pairs) == 21 and len(means) == 9
    seed0 = [p for p in pairs if p.study == "main_comparison" and p.seed == 0]
    own = [p for p in pairs if p.method.cold_start_key == seed0[0].method.cold_start_key]
    assert means[seed0[0].method.cold_start_key] == pytest.approx(sum(p.difference("final_pass1") for p in own) / len(own))
