"""What the command line hands on: an override's value as typed, and the doctor's median share (not another of
its numbers) to the gate map. The expected values are typed in the test."""

import json

from sapo_lab import cli
from sapo_lab.evidence import doctor_map


def test_an_override_value_keeps_every_equals_sign_after_the_first():
    # catches: "--key=a=b=c" split at every "=" (the value cut to "a"), or at the last one
    assert cli.parse_overrides(["--task.name=a=b=c", "--seed", "3"]) == {"task.name": "a=b=c", "seed": "3"}


def test_doctor_matches_the_map_on_the_median_share_removed(tmp_path, monkeypatch, capsys):
    # catches: the map's nearest cell looked up with the largest (or the first, or the last) share instead of
    # the median; the three steps remove 0.02, 0.30 and 0.04 of the signal: median 0.04, largest 0.30
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": step, "ratio/max_abs_log_ratio": 0.5, "ratio/q01": 0.7, "ratio/q99": 1.4,
             "losses/signal_removed_frac": share} for step, share in ((1, 0.02), (2, 0.30), (3, 0.04))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    asked = []
    monkeypatch.setattr(doctor_map, "map_lines", lambda regime, activity: asked.append((regime, activity)) or [])
    assert cli.main(["doctor", str(run)]) == 0
    assert asked == [("gate active", 0.04)]
    assert capsys.readouterr().out.startswith("verdict: gate active")
