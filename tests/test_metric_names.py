"""Metrics-row names: every key in a namespace, flat rows read (and migrated) under today's keys.

``data/flat_metrics_row.json`` is step 10 of ``results/confirm_addition/runs/grpo_seed12`` as it was
written before the namespaces (143 keys: a dev evaluation and a gradient comparison among them).
"""

import json
from pathlib import Path

import pytest
from _micro import QUIET, micro, parity_reward

from sapo_lab.runs.metric_names import NAMESPACES, STEP, canonical, is_flat, migrate_row
from sapo_lab.runs.run_folder import RunDirError, RunFolder, read_metrics
from sapo_lab.studies.spec import load_declaration
from sapo_lab.studies.verdicts import collapse_verdict

ROOT = Path(__file__).resolve().parents[1]
FLAT_ROW = json.loads((Path(__file__).parent / "data" / "flat_metrics_row.json").read_text())
COMMITTED = ROOT / "results" / "confirm_addition" / "runs" / "grpo_seed12" / "metrics.jsonl"


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
    """Catches: a results file left with flat keys (the chapters and studies read namespaced keys only)."""
    flat = []
    for path in sorted((ROOT / "results").rglob("metrics.jsonl")):
        with open(path) as f:
            first = json.loads(f.readline())
        if is_flat(first) or not all(_namespaced(k) for k in first):
            flat.append(str(path.relative_to(ROOT)))
    assert flat == []


def test_the_committed_migration_is_what_migrate_row_gives():
    """Catches: the name table changed after the results were migrated (old rows would then read differently
    from the committed files), a value altered in the renaming, or a key lost."""
    with open(COMMITTED) as f:
        committed = json.loads(f.readlines()[9])
    migrated = migrate_row(FLAT_ROW)
    assert migrated == committed
    assert len(migrated) == len(FLAT_ROW)  # entropy dropped, rollout/empty_responses added
    assert migrated["eval/dev_pass1"] == FLAT_ROW["dev_pass1"] and migrated["tokseq/cos"] == FLAT_ROW["tokseq_cos"]
    assert migrated["ratio/q95"] == FLAT_ROW["ratio_q95"] and migrated["ratio/rw_q95"] == FLAT_ROW["rw_q95"]
    assert migrated["counters/tokens_generated"] == FLAT_ROW["total_tokens_generated"]
    assert migrated["losses/empty_responses"] == FLAT_ROW["empty_responses"]
    assert migrate_row(migrated) is migrated  # a namespaced row is left alone


def test_a_flat_metrics_file_is_read_and_truncated_under_namespaced_keys(tmp_path):
    """Catches: resuming a run folder from before the namespaces mixing flat and namespaced rows in one file."""
    later = {**FLAT_ROW, "step": 11}
    folder = RunFolder(str(tmp_path))
    Path(folder.metrics).write_text(json.dumps(FLAT_ROW) + "\n" + json.dumps(later) + "\n")
    rows = folder.read_metrics().rows
    assert [r["step"] for r in rows] == [10, 11] and not any(is_flat(r) for r in rows)
    folder.truncate_metrics(10, log=lambda m: None)
    assert [json.loads(line) for line in Path(folder.metrics).read_text().splitlines()] == [migrate_row(FLAT_ROW)]


def test_a_flat_row_with_a_possibly_empty_response_is_refused(tmp_path):
    """Catches: inventing the rollout's empty-response count (flat rows kept only the trained minibatches' count)."""
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({**FLAT_ROW, "response_length_min": 0}) + "\n")
    with pytest.raises(RunDirError, match="line 1: .*empty response"):
        read_metrics(str(path))


def test_user_keys_survive_migration():
    """Catches: a key that user code added to the row dropped or renamed along with the trainer's."""
    assert migrate_row({"step": 3, "reward_mean": 0.5, "my_metric": 1})["my_metric"] == 1
    assert not is_flat({"step": 3, "my_metric": 1})


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
    from sapo_lab.studies.results import load_study

    run = load_study("confirm_addition", ROOT / "results").runs[0]
    steps, values = run.series("eval/dev_pass1")
    assert steps and run.series("dev_pass1") == (steps, values)
    with pytest.raises(ValueError, match="unknown metric"):
        run.series("dev_pas1")
