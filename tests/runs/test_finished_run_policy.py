"""A finished run's folder is never started again over its result (sapo_lab.runs.run_policy.prepare), on a
folder planted here: the run finished (summary.json) and kept no checkpoint, the one case where no other check
stands in the way."""

import pytest

from sapo_lab.runs.config import load_config
from sapo_lab.runs.run_folder import RunDirError, RunFolder
from sapo_lab.runs.run_policy import prepare


# Catches: the finished-run refusal dropped: a fresh start of the same config would then be taken for a run
# killed before its first checkpoint and train over the finished run's summary.json and metrics.
def test_a_finished_run_without_checkpoints_is_not_started_again(tmp_path):
    cfg = load_config("micro")
    folder = RunFolder(str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    folder.write_config(cfg)
    folder.write_summary({"final_pass1": 0.5})
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunDirError, match=r"already holds a run \(finished: summary.json\)"):
        prepare(folder.path, cfg, log=lambda *_: None)
    assert folder.read_summary() == {"final_pass1": 0.5}
