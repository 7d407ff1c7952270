"""Metrics-row names: every key in a namespace, in the trainer's rows and in every committed file; flat names
in study declarations resolved to their keys."""

from pathlib import Path

import pytest
from _micro import QUIET, micro, parity_reward

from sapo_lab.runs.metric_names import NAMESPACES, STEP, canonical
from sapo_lab.runs.run_folder import read_metrics
from sapo_lab.studies.spec import load_declaration
from sapo_lab.studies.verdicts import collapse_verdict

ROOT = Path(__file__).resolve().parents[2]


def _namespaced(key: str) -> bool:
    return key == STEP or key.split("/", 1)[0] in NAMESPACES and key.count("/") == 1


def test_a_trained_run_writes_only_namespaced_keys(tmp_path):
    """Catches: a new metric added to the row without a namespace, or a producer still writing a flat name."""
    from sapo_lab.training.trainer import train

    cfg = micro(**{"gradient_comparison_every": 2, "loss_type": "grpo", "beta": 0.1, "max_steps": 2})
    train(cfg, str(tmp_path / "run"), reward_fn=parity_reward, **QUIET)
    rows = read_metrics(str(tmp_path / "run" / "metrics.jsonl")).rows
    keys = set().union(*rows)
    assert [k for k in keys if not _namespaced(k)] == []
    # one producer per quantity: the duplicates of the flat rows are gone, both empty-response counts kept
    assert "rollout/entropy_mean" in keys and not any(k.endswith("/entropy") for k in keys)
    assert {"rollout/empty_responses", "losses/empty_responses", "losses/kl_ref", "tokseq/cos"} <= keys
    assert {k.split("/")[0] for k in keys - {STEP}} == set(NAMESPACES)


def test_every_committed_row_is_namespaced():
    """Catches: a results file with a flat key in any row (the reader takes keys as written, and the chapters and
    studies read namespaced keys only)."""
    flat = []
    for path in sorted((ROOT / "results").rglob("metrics.jsonl")):
        rows = read_metrics(str(path)).rows
        if not all(_namespaced(k) for row in rows for k in row):
            flat.append(str(path.relative_to(ROOT)))
    assert flat == []


@pytest.mark.parametrize(("name", "key"), [
    ("dev_pass1", "eval/dev_pass1"), ("entropy", "rollout/entropy_mean"), ("ratio_q95", "ratio/q95"),
    ("total_tokens_generated", "counters/tokens_generated"), ("eval/dev_pass1", "eval/dev_pass1"), ("step", "step"),
])
def test_canonical_resolves_flat_and_namespaced_names(name, key):
    """Catches: a study declaration's flat metric name (frozen before the namespaces) no longer resolving."""
    assert canonical(name) == key


@pytest.mark.parametrize("name", ["dev_pas1", "training/loss", "rollout/"])
def test_unknown_metric_names_are_refused(name):
    """Catches: a typo in a collapse criterion accepted and then never firing."""
    with pytest.raises(ValueError, match="unknown metric"):
        canonical(name)


def test_a_collapse_criterion_on_a_metric_no_row_has_is_an_error():
    """Catches: a well-formed but absent key (``rollout/entropy``) silently never firing."""
    rows = [{"step": 1, "rollout/entropy_mean": 0.0}]
    assert collapse_verdict(rows, [{"metric": "entropy", "kind": "below", "threshold": 0.1}])["collapsed"]
    with pytest.raises(ValueError, match="no metrics row has"):
        collapse_verdict(rows, [{"metric": "rollout/entropy", "kind": "below", "threshold": 0.1}])


def test_every_committed_declaration_names_known_metrics():
    """Catches: a committed study whose collapse metric no longer resolves (its verdicts could not be recomputed)."""
    for path in sorted((ROOT / "experiments").glob("*.json")):
        for c in load_declaration(str(path))["collapse"]:
            assert _namespaced(canonical(c["metric"])), (path.name, c["metric"])


def test_a_study_series_takes_either_name_and_refuses_a_typo():
    """Catches: a chapter's curve silently empty because it asked for a misspelt metric."""
    from sapo_lab.evidence.results import load_study

    run = load_study("confirm_addition", ROOT / "results").runs[0]
    steps, values = run.series("eval/dev_pass1")
    assert steps and run.series("dev_pass1") == (steps, values)
    with pytest.raises(ValueError, match="unknown metric"):
        run.series("dev_pas1")
