"""The run folder's owner (sapo_lab.runs.run_folder) and its durable writes (sapo_lab.runs.durable).

Each test names the mistake it catches."""

import json
import os
import pathlib

import pytest
from _micro import QUIET, micro

import sapo_lab.runs.durable as durable
from sapo_lab.runs.run_folder import (
    RunDirError,
    RunFolder,
    is_temporary,
    parse_step_dir,
    read_metrics,
    step_dir_name,
)

PACKAGE = pathlib.Path(durable.__file__).resolve().parents[1]


def _fsynced(monkeypatch):
    """The paths os.fsync is called on, in order."""
    seen = []
    real = os.fsync

    def fsync(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_a_write_killed_before_the_rename_leaves_the_old_file(tmp_path, monkeypatch):
    """Catches: writing the target in place (open(path, "w")), which a kill leaves empty or half written."""
    folder = RunFolder(str(tmp_path))
    folder.write_summary({"final_pass1": 0.25})
    before = pathlib.Path(folder.summary).read_bytes()

    def killed(src, dst):
        raise KeyboardInterrupt("killed before the rename")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        folder.write_summary({"final_pass1": 0.75})
    assert pathlib.Path(folder.summary).read_bytes() == before
    leftovers = [n for n in os.listdir(tmp_path) if n != "summary.json"]
    assert leftovers and all(is_temporary(n) for n in leftovers)  # resume recognises and removes them


def test_whole_file_writes_fsync_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    """Catches: a rename without fsync (a power cut can then leave an empty file under the new name)
    and a missing directory fsync (the rename itself can be lost)."""
    folder = RunFolder(str(tmp_path))
    seen = _fsynced(monkeypatch)
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renames.append(len(seen)), real_replace(a, b))[1])
    folder.write_config(micro())
    assert seen[: renames[0]] == [folder.config + ".tmp"]
    assert seen[renames[0] :] == [str(tmp_path)]
    saved = json.loads(pathlib.Path(folder.config).read_text())
    assert saved == json.loads(json.dumps(micro().to_dict())) and list(saved) == sorted(saved)  # keys sorted, as ever


def test_each_metrics_row_is_fsynced_when_appended(tmp_path, monkeypatch):
    """Catches: appending rows without flush and fsync (a crash loses rows the log reported written)."""
    folder = RunFolder(str(tmp_path))
    folder.start_metrics()
    seen = _fsynced(monkeypatch)
    for step in (1, 2, 3):
        folder.append_metrics({"step": step, "rollout/reward_mean": 0.5})
    assert seen.count(folder.metrics) == 3
    assert [r["step"] for r in folder.read_metrics().rows] == [1, 2, 3]


def test_every_file_of_a_run_is_fsynced(tmp_path, monkeypatch):
    """Catches: one of the run's writes (config, cold-start evaluation, metrics rows, summary, a checkpoint's
    or the final model's files) going around the durable helpers."""
    from sapo_lab.training.trainer import train

    seen = _fsynced(monkeypatch)
    run = tmp_path / "run"
    train(micro(max_steps=2), str(run), **QUIET)
    folder = RunFolder(str(run))
    for path in (folder.config, folder.cold_start_eval, folder.summary):
        assert path + ".tmp" in seen, path
    assert seen.count(folder.metrics) == 2  # one per row
    for sub in (folder.cold_start, folder.final_model, os.path.join(folder.checkpoints, step_dir_name(2))):
        names = [n for n in os.listdir(sub) if n != "manifest.json"]
        fsynced_names = {os.path.basename(p) for p in seen if os.path.basename(os.path.dirname(p)).startswith(
            (os.path.basename(sub) + ".tmp", ".tmp-step-"))}
        assert set(names) <= fsynced_names, (sub, set(names) - fsynced_names)


def test_a_torn_last_metrics_line_is_left_out_and_reported(tmp_path):
    """Catches: a reader that refuses a killed run's torn row (resume would be impossible), or that reads
    it as a row."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "x": 1.5}\n{"step": 2, "x": NaN}\n{"step": 3, "x"')
    log = read_metrics(str(path))
    assert [r["step"] for r in log.rows] == [1, 2] and log.torn_last_line
    assert "".join(log.lines) == '{"step": 1, "x": 1.5}\n{"step": 2, "x": NaN}\n'  # the bytes as written
    assert not read_metrics(str(tmp_path / "missing.jsonl")).rows


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"step": 1}\n{"step": \n{"step": 3}\n', "line 2 is damaged"),
        ('{"step": 1}\n{"no_step": 2}\n{"step": 3}\n', "line 2 is damaged"),
        ('{"step": 1}\n{"step": 1.5}\n{"step": 3}\n', "line 2 is damaged"),
        ('{"step": 2}\n{"step": 2}\n', "line 2: step 2 after step 2"),
    ],
)
def test_damage_before_the_last_line_is_an_error_naming_the_line(tmp_path, text, needle):
    """Catches: a damaged middle row skipped silently (its numbers would vanish from every analysis)."""
    path = tmp_path / "metrics.jsonl"
    path.write_text(text)
    with pytest.raises(RunDirError, match=needle):
        read_metrics(str(path))


def test_truncation_keeps_the_prefix_byte_for_byte(tmp_path):
    """Catches: rewriting the kept rows through json (floats, key order or NaN could change on the way)."""
    folder = RunFolder(str(tmp_path))
    rows = ['{"step": 1, "optim/lr": 1e-05, "v": NaN}\n', '{"step": 2, "optim/lr": 0.1}\n',
            '{"step": 3, "optim/lr": 0.30000000000000004}\n']
    pathlib.Path(folder.metrics).write_text("".join(rows) + '{"step": 4, "l')
    messages = []
    folder.truncate_metrics(2, log=messages.append)
    assert pathlib.Path(folder.metrics).read_text() == "".join(rows[:2])
    assert any("half-written last line" in m for m in messages) and any("dropped 1 row(s)" in m for m in messages)


def test_step_folder_names_round_trip():
    """Catches: a second spelling of step-NNNNNN (a reader that parses "step-12" differently from the writer)."""
    assert step_dir_name(7) == "step-000007" and parse_step_dir(step_dir_name(123456)) == 123456
    assert parse_step_dir("damaged-step-000004") is None and parse_step_dir("step-12x") is None


def test_run_file_names_are_spelled_only_by_the_run_folder():
    """Catches: a module of the training, runs or studies layer writing or reading a run or study file by its
    literal name again (only the run folder and the study folder spell them)."""
    names = ('"metrics.jsonl"', '"summary.json"', '"cold_start_eval.json"', '"resumes.jsonl"', '"step-{',
             '"study.json"', '"study_record.json"', '"diverged.json"', '"study_wall.json"', '"environment.json"',
             '"summary.csv"', '"_coldstart"')
    offenders = []
    for path in sorted(p for layer in ("training", "runs", "studies") for p in (PACKAGE / layer).glob("*.py")):
        if path.name in ("run_folder.py", "study_folder.py"):
            continue
        text = path.read_text()
        offenders += [f"{path.name}: {n}" for n in names if n in text]
    assert offenders == []
