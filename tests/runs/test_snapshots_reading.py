"""Which steps of a run have weights (sapo_lab.runs.snapshots), on run folders planted here with empty weights
files: a step folder without its weights file is not a saved step, and a missing step's error names the saved
steps on either side of it."""

import os

import pytest

from sapo_lab.runs.snapshots import CheckpointMissing, saved_steps, weights_for_step


def _plant(run, sub, step, weights=True):
    folder = os.path.join(run, sub, f"step-{step:06d}")
    os.makedirs(folder)
    if weights:
        open(os.path.join(folder, "model.safetensors"), "wb").close()


# Catches: a step folder whose weights were never written (a snapshot killed while writing) listed as saved, and a
# missing step's error naming the lowest saved step instead of the nearest one below it.
def test_saved_steps_need_their_weights_and_the_error_names_the_nearest(tmp_path):
    run = str(tmp_path)
    for step in (2, 3):
        _plant(run, "snapshots", step)
    _plant(run, "snapshots", 5, weights=False)
    for step in (6, 10):
        _plant(run, "checkpoints", step)
    assert saved_steps(run) == [2, 3, 6, 10]
    assert weights_for_step(run, 6) == os.path.join(run, "checkpoints", "step-000006", "model.safetensors")
    with pytest.raises(CheckpointMissing, match="nearest saved steps: 3 and 6"):
        weights_for_step(run, 5)
