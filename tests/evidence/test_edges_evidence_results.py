"""Reading a study at its edges: a selection found by its rule or its tag, and the provenance's time span taken
from the first start to the last finish over every invocation."""

import json
from pathlib import Path

from sapo_lab.evidence.results import Run, Study


def test_a_selection_is_found_by_its_tag_and_by_its_rule():
    """Catches the lookup by tag alone: a fixed-step selection is tagged 'step_50' and its rule is 'step'; both
    names find it, and a rule the record does not hold finds nothing."""
    selection = {"by": "step", "value": 50, "step": 50, "dev_pass1": 0.25}
    run = Run("sapo_seed1", "sapo", 1, {}, {"selections": [{"by": "final", "step": 80}, selection]}, Path("."))
    assert run.selection("step_50") is selection and run.selection("step") is selection
    assert run.selection("final")["step"] == 80 and run.selection("best_dev") is None


def _invocation(started, finished, commit, dirty):
    return {"argv": ["sapo_lab", "study", "experiments/x.json"], "git_commit": commit, "git_dirty": dirty,
            "started_utc": started, "finished_utc": finished, "wall_s": 600.0, "torch": "2.5.1", "cpu_count": 2}


def test_the_provenance_spans_the_first_start_to_the_last_finish(tmp_path):
    """Catches the finish read from the earliest invocation: the second invocation (a resume) finished last, at
    2026-12-02T11:30; the span starts at the first one's start; the commit of the dirty tree carries '+'."""
    invocations = [_invocation("2026-12-01T10:00:05", "2026-12-01T12:00:00", "abc1234567", False),
                   _invocation("2026-12-02T09:00:00", "2026-12-02T11:30:59", "def5678901", True)]
    (tmp_path / "environment.json").write_text(json.dumps({"invocations": invocations}))
    got = Study("x", tmp_path, {"methods": {}}, [], []).provenance()
    assert (got["started"], got["finished"]) == ("2026-12-01T10:00", "2026-12-02T11:30")
    assert got["commits"] == ["abc1234", "def5678+"] and got["wall_s"] == 1200.0


def test_a_text_value_keeps_the_characters_a_tag_allows():
    """Catches a character the docstring allows ('_ . = -', letters, digits) replaced, or one it refuses kept: every
    other character (a space, '/', ':', '+', '$', '*') becomes '-'."""
    from sapo_lab.evidence.results import value_tag

    assert value_tag("mix=a_b.c-d") == "mix=a_b.c-d"
    assert value_tag("a b/c:d+e$f*g") == "a-b-c-d-e-f-g"
    assert value_tag(60) == "60" and value_tag(1e6) == "1e06"
