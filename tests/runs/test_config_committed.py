"""Every committed config still loads, and loads to what it says.

The run folders under results/ hold the ``config.json`` each run wrote; a study resumes and
reproduces against them. These tests read them all with today's loader.
"""

import glob
import json
import os

import pytest

from sapo_lab.runs.config import config_from_dict
from sapo_lab.studies.expansion import expand_runs
from sapo_lab.studies.spec import load_declaration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "results", "*", "runs", "*", "config.json")))
DECLARATIONS = sorted(glob.glob(os.path.join(ROOT, "experiments", "*.json")))


def _as_json(cfg) -> dict:
    return json.loads(json.dumps(cfg.to_dict()))  # tuples as the lists config.json holds


def test_every_committed_run_config_is_written_back_byte_for_byte(tmp_path):
    # catches a loader that changes a value's type or form (290 for 290.0, a list for a tuple's JSON, a
    # default filled in differently), a reordered or renamed key, and a config.json that no longer loads
    assert len(RUN_CONFIGS) >= 100, "the committed studies' run folders are missing"
    out = tmp_path / "config.json"
    for path in RUN_CONFIGS:
        text = open(path).read()
        cfg = config_from_dict(json.loads(text))
        assert _as_json(cfg) == json.loads(text), path
        cfg.save(str(out))
        assert out.read_text() == text, path


@pytest.mark.parametrize("path", DECLARATIONS, ids=[os.path.basename(p) for p in DECLARATIONS])
def test_every_declared_study_expands_to_the_configs_its_runs_saved(path):
    # catches a declaration the new loader refuses, and an override read differently from when the runs
    # were made (a study would then resume or compare against configs it did not run)
    study = load_declaration(path)
    runs = expand_runs(study)
    assert runs
    for run in runs:
        saved = os.path.join(ROOT, "results", study["name"], "runs", run["run_id"], "config.json")
        if os.path.isfile(saved):
            # as text: a dict comparison would take 0 for 0.0
            assert json.dumps(run["config"].to_dict(), indent=2, sort_keys=True) == open(saved).read(), saved
