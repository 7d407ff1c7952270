"""Checkpoint selection on synthetic metrics files."""

import json
import os

import pytest
import torch

from sapo_lab.runs.snapshots import CheckpointMissing, run_metric_rows, save_snapshot, saved_steps
from sapo_lab.studies.checkpoint_rules import checkpoint_by_rule, select_step
from sapo_lab.studies.selected_eval import load_weights

DEV = {2: 0.30, 4: 0.55, 6: 0.40, 8: 0.55, 10: 0.20}


def _rows():
    # 100 tokens per step except a long step 5; 1.5 s per step plus 1 s per dev evaluation
    rows, tokens, elapsed = [], 0, 0.0
    for step in range(1, 11):
        tokens += 300 if step == 5 else 100
        elapsed += 1.5 + (1.0 if step in DEV else 0.0)
        rows.append({"step": step, "eval/dev_pass1": DEV.get(step), "counters/tokens_generated": tokens,
                     "time/elapsed_s": elapsed})
    return rows


def _write_run(tmp_path, rows, saved=()):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step in saved:
        d = run / "checkpoints" / f"step-{step:06d}"
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"")
    return str(run)


def test_rules_pick_the_declared_step():
    rows = _rows()
    assert select_step(rows, "best_dev")["step"] == 4  # 0.55 at steps 4 and 8: the earlier wins
    assert select_step(rows, "final")["step"] == 10
    assert select_step(rows, "step", 7)["step"] == 7
    # tokens after step s: 100 s, +200 from step 5 on -> 700 at step 5, 1000 at step 8
    assert select_step(rows, "rollout_tokens", 999)["step"] == 7
    assert select_step(rows, "rollout_tokens", 1000)["step"] == 8
    assert select_step(rows, "rollout_tokens", 699)["step"] == 4  # step 5 would cross the budget
    # elapsed after step s: 1.5 s + 1 per dev step so far -> step 4: 6 + 2 = 8.0
    assert select_step(rows, "wall_clock", 8.0)["step"] == 4 and select_step(rows, "wall_clock", 7.9)["step"] == 3
    assert select_step(rows, "best_dev", candidates=[2, 6, 10])["step"] == 6
    assert select_step(rows, "rollout_tokens", 10**6)["ended_before_budget"] is True
    assert select_step(rows, "rollout_tokens", 999)["ended_before_budget"] is False


def test_bad_rules_and_values_are_clear_errors():
    rows = _rows()
    with pytest.raises(ValueError, match="unknown selection rule"):
        select_step(rows, "best_eval")
    with pytest.raises(ValueError, match="needs a numeric value"):
        select_step(rows, "step")
    with pytest.raises(ValueError, match="takes no value"):
        select_step(rows, "best_dev", 3)
    with pytest.raises(ValueError, match="not among the logged"):
        select_step(rows, "step", 11)
    with pytest.raises(ValueError, match="first candidate step already used 100"):
        select_step(rows, "rollout_tokens", 50)
    with pytest.raises(ValueError, match="no dev evaluation"):
        select_step(rows, "best_dev", candidates=[1, 3])


def test_pruned_checkpoint_is_an_error_never_a_substitute(tmp_path):
    run = _write_run(tmp_path, _rows(), saved=(8, 10))  # what save_steps=2 with the trainer's keep=2 leaves
    with pytest.raises(CheckpointMissing, match="selected step 4.*nearest saved steps: None and 8"):
        checkpoint_by_rule(run, "best_dev")
    choice = checkpoint_by_rule(run, "best_dev", saved_only=True)  # the declared alternative rule
    assert choice["step"] == 8 and choice["weights"].endswith(os.path.join("step-000008", "model.safetensors"))
    assert checkpoint_by_rule(run, "final")["step"] == 10
    assert saved_steps(run) == [8, 10]


def test_torn_last_line_is_left_out_and_a_damaged_middle_line_refused(tmp_path):
    """The one metrics reader's tolerance (runs.run_folder): a torn last row is a killed append and is left
    out; a damaged earlier row or a step going backwards is an error naming the line. Catches: selection reading
    its own copy of the rules (refusing the torn row, or accepting damage in the middle), and unordered steps."""
    run = _write_run(tmp_path, _rows())
    with open(os.path.join(run, "metrics.jsonl"), "a") as f:
        f.write('{"step": 11, "dev_p')
    assert [r["step"] for r in run_metric_rows(run)] == [r["step"] for r in _rows()]
    lines = open(os.path.join(run, "metrics.jsonl")).read().splitlines(keepends=True)
    lines[3] = lines[3][:20] + "\n"
    open(os.path.join(run, "metrics.jsonl"), "w").writelines(lines)
    with pytest.raises(ValueError, match="metrics.jsonl line 4 is damaged"):
        run_metric_rows(run)
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 2}\n{"step": 1}\n')
    with pytest.raises(ValueError, match="increasing"):
        run_metric_rows(run)


def test_snapshot_roundtrip_loads_that_steps_weights(tmp_path):
    from sapo_lab.training.model import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("cpu-micro", seed=0)
    run = tmp_path / "run"
    model.save_pretrained(str(run / "cold_start"))
    tok.save_pretrained(str(run / "cold_start"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    save_snapshot(str(run), 3, model)
    loaded, _ = load_weights(str(run), 3)
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(CheckpointMissing):
        load_weights(str(run), 4)
