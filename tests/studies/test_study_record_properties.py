"""The study record's properties, each observed where it acts: run identity, environment.json, the study's
.gitignore (asked of git itself), the self-verifying manifest and a run's study_record.json.

Expected values come from the inputs the tests write (sizes and digests from hashlib, counters from the planted
metrics rows, the commit from ``git rev-parse``), never from the code under test.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from sapo_lab.runs.identity import run_identity, same_run
from sapo_lab.runs.manifest import MANIFEST, verify_manifest, write_manifest
from sapo_lab.runs.study_folder import StudyFolder
from sapo_lab.studies import environment
from sapo_lab.studies.record import finish_record

# ---------------------------------------------------------------- run identity

CONFIG = {"loss": {"loss_type": "sapo", "sapo_temperature_pos": 1.0},
          "evaluation": {"pass_k": (1, 4), "splits": ("dev", "eval")},
          "cold_start": {"cache_dir": "/scratch/a", "steps": 300}}


def test_two_configs_differing_only_in_tuple_versus_list_are_the_same_run():
    # a config in memory holds tuples, its config.json lists: the run read back from disk must be the same run
    # (catches an identity that copies without normalising, which would retrain a finished run)
    from_disk = json.loads(json.dumps(CONFIG))
    assert from_disk["evaluation"]["pass_k"] == [1, 4]
    assert same_run(CONFIG, from_disk) and same_run(from_disk, CONFIG)


def test_where_a_cold_start_is_cached_is_not_part_of_the_run():
    moved = {**CONFIG, "cold_start": {"cache_dir": "/elsewhere/b", "steps": 300}}
    assert same_run(CONFIG, moved)
    assert "cache_dir" not in run_identity(CONFIG)["cold_start"]
    # what the cold start computes is: 300 against 301 steps are two runs
    assert not same_run(CONFIG, {**CONFIG, "cold_start": {"cache_dir": "/scratch/a", "steps": 301}})
    assert not same_run(CONFIG, {**CONFIG, "loss": {"loss_type": "grpo", "sapo_temperature_pos": 1.0}})


def test_run_identity_leaves_the_callers_config_whole():
    # catches an identity that pops the location key out of the caller's own dict (its config.json would lose it)
    config = json.loads(json.dumps(CONFIG))
    run_identity(config)
    assert config["cold_start"]["cache_dir"] == "/scratch/a"


# ---------------------------------------------------------------- environment.json


def test_environment_json_keeps_every_invocation_in_order(tmp_path):
    # catches an append that rewrites the file with the newest invocation only (the history of a resumed study)
    folder = StudyFolder(str(tmp_path / "study"))
    folder.start()
    invocations = [{"argv": ["study", "x.json"], "n": i} for i in range(3)]
    for inv in invocations:
        folder.append_invocation(inv)
    assert json.loads((tmp_path / "study" / "environment.json").read_text()) == {"invocations": invocations}


def test_each_invocation_that_trained_a_run_keeps_its_wall_time(tmp_path):
    run = StudyFolder(str(tmp_path / "study")).run("r0")
    os.makedirs(run.path)
    run.append_wall("train", 12.5)
    run.append_wall("resume", 3.0)
    assert json.loads(Path(run.wall).read_text()) == [{"action": "train", "wall_s": 12.5},
                                                      {"action": "resume", "wall_s": 3.0}]


def _repo(path: Path, content: str) -> str:
    """A one-commit git repository holding sapo_lab/studies/environment.py; its HEAD."""
    (path / "sapo_lab/studies").mkdir(parents=True)
    (path / "sapo_lab/studies/environment.py").write_text(content)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", content], cwd=path, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True).stdout.strip()


def test_the_environment_records_sapo_labs_commit_and_the_whole_command_line(tmp_path, monkeypatch):
    # the study is started from another repository: the commit recorded is the one of the sapo_lab that runs
    # (catches git run in the cwd), and the argv is the whole command line (catches the program name alone)
    installed, elsewhere = tmp_path / "installed", tmp_path / "elsewhere"
    commit = _repo(installed, "# the sapo_lab that runs\n")
    _repo(elsewhere, "# the user's project\n")
    monkeypatch.setattr(environment, "__file__", str(installed / "sapo_lab/studies/environment.py"))
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(environment, "kernel_fingerprint", lambda: "0" * 16)
    argv = ["sapo_lab", "study", "experiments/gate_map.json", "--resume"]
    monkeypatch.setattr(sys, "argv", argv)
    captured = environment.capture_environment()
    assert (captured["git_commit"], captured["git_dirty"], captured["argv"]) == (commit, False, argv)
    (installed / "sapo_lab/studies/environment.py").write_text("# edited\n")
    assert environment.capture_environment()["git_dirty"] is True


def test_the_kernel_fingerprint_leaves_torchs_random_stream_and_threads_as_they_were():
    # the fingerprint builds a model with its own seed: a caller's random stream must continue unchanged
    # (catches the fork of the generator dropped) and the caller's thread count be restored
    import torch

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        torch.manual_seed(1234)
        expected = torch.rand(5)
        torch.manual_seed(1234)
        first = environment.kernel_fingerprint()
        assert torch.equal(torch.rand(5), expected)
        assert torch.get_num_threads() == 2
        assert environment.kernel_fingerprint() == first and len(first) == 16
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- the study's .gitignore


def _ignored_by_git(repo: Path, paths: list[str]) -> set[str]:
    done = subprocess.run(["git", "check-ignore", "--stdin"], cwd=repo, input="\n".join(paths) + "\n",
                          capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    return set(done.stdout.split())


WEIGHTS = ["study/runs/r0/checkpoints/step-000010/model.safetensors", "study/runs/r0/final_model/model.safetensors",
           "study/runs/r0/snapshots/step-000005/model.safetensors", "study/runs/r0/cold_start/model.safetensors",
           "study/_coldstart/seed0/model.safetensors", "study/summary.json.tmp"]
KEPT = ["study/study.json", "study/environment.json", "study/summary.json", "study/summary.csv",
        "study/runs/r0/config.json", "study/runs/r0/metrics.jsonl", "study/runs/r0/summary.json",
        "study/runs/r0/study_record.json", "study/.gitignore"]


def test_a_studys_gitignore_keeps_every_weight_out_and_every_result_in(tmp_path):
    # git itself decides (check-ignore on real files): catches a pattern dropped or a file written without newlines
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    StudyFolder(str(tmp_path / "study")).start()
    for rel in WEIGHTS + KEPT[:-1]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    assert _ignored_by_git(tmp_path, WEIGHTS + KEPT) == set(WEIGHTS)


def test_run_ids_are_the_run_folders_only(tmp_path):
    folder = StudyFolder(str(tmp_path))
    folder.start()
    for name in ("b", "a"):
        os.makedirs(folder.run(name).path)
    Path(folder.runs, "notes.txt").write_text("not a run")
    assert folder.run_ids() == ["a", "b"]


# ---------------------------------------------------------------- manifest.json


def _folder(tmp_path, files: dict) -> str:
    d = tmp_path / "ckpt"
    d.mkdir()
    for name, data in files.items():
        (d / name).write_bytes(data)
    return str(d)


def test_the_manifest_records_each_files_size_and_sha256(tmp_path):
    files = {"model.safetensors": b"\x00\x01" * 100, "state.json": b'{"step": 10}'}
    d = _folder(tmp_path, files)
    write_manifest(d)
    written = json.loads(Path(d, MANIFEST).read_text())["files"]
    assert written == {n: {"size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for n, b in files.items()}
    assert verify_manifest(d) is None
    write_manifest(d)   # a second write does not list the first manifest (whose bytes it then replaces)
    assert MANIFEST not in json.loads(Path(d, MANIFEST).read_text())["files"] and verify_manifest(d) is None


def test_a_manifest_with_no_files_does_not_verify(tmp_path):
    # an empty file list vouches for nothing: a checkpoint whose files were never listed is not complete
    d = _folder(tmp_path, {})
    write_manifest(d)
    assert verify_manifest(d) == f"{MANIFEST} is damaged"


def test_a_file_changed_in_one_byte_at_the_same_size_fails_verification(tmp_path):
    # catches a check on the sizes alone
    d = _folder(tmp_path, {"model.safetensors": b"\x00\x01" * 100})
    write_manifest(d)
    Path(d, "model.safetensors").write_bytes(b"\x00\x02" + b"\x00\x01" * 99)
    assert verify_manifest(d) == f"model.safetensors does not match its SHA-256 in {MANIFEST} (the bytes changed)"
    os.remove(Path(d, "model.safetensors"))
    assert verify_manifest(d) == "model.safetensors is missing"


# ---------------------------------------------------------------- study_record.json


STUDY = {"collapse": [{"metric": "rollout/entropy", "kind": "below", "threshold": 0.1}], "selection": [],
         "breakdown_samples": 0}
ROWS = [{"step": s, "rollout/entropy": e, "counters/tokens_generated": 100 * s, "counters/tokens_trained": 60 * s,
         "counters/optimizer_steps": 4 * s, "counters/verifier_calls": 8 * s, "time/elapsed_s": 1.5 * s}
        for s, e in ((1, 0.9), (2, 0.8), (3, 0.7))]
RUN = {"run_id": "sapo_seed0", "method": "sapo", "seed": 0, "grid": {}, "config": {}}


def _run_dir(tmp_path, summary=None, diverged=None) -> str:
    run = StudyFolder(str(tmp_path / "study")).run(RUN["run_id"])
    os.makedirs(run.path)
    Path(run.metrics).write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    if summary is not None:
        Path(run.summary).write_text(json.dumps(summary))
    if diverged is not None:
        run.write_diverged("loss is nan", diverged)
    return run.path


def test_the_record_carries_the_last_rows_cumulative_counters(tmp_path):
    # counters are cumulative: the run's totals are the last row's (catches the first row's, 1/3 of them)
    d = _run_dir(tmp_path, summary={"status": "finished", "steps": 3, "final_pass1": 0.4, "cold_start_pass1": 0.1})
    record = finish_record(RUN, d, STUDY)
    assert (record["rollout_tokens"], record["update_tokens"], record["optimizer_steps"], record["verifier_calls"],
            record["train_elapsed_s"]) == (300, 180, 12, 24, 4.5)
    assert (record["status"], record["steps"], record["final_pass1"]) == ("finished", 3, 0.4)
    assert record["collapse"]["collapsed"] is False
    assert json.loads(Path(d, "study_record.json").read_text()) == record


def test_a_diverged_run_is_recorded_as_collapsed_at_its_divergence(tmp_path):
    # catches the divergence step not passed to the verdict: entropy never fell below 0.1, so only it can fire
    d = _run_dir(tmp_path, diverged=3)
    record = finish_record(RUN, d, STUDY)
    assert (record["status"], record["steps"], record["selections"]) == ("diverged", 3, [])
    assert record["collapse"] == {"collapsed": True, "step": 3, "criterion": None,
                                  "reason": "training diverged (NaN/inf)"}


def test_a_finished_record_is_read_back_not_rewritten(tmp_path):
    # a record already written (its selected checkpoints evaluated, hours of work) is the record: catches recomputing
    d = _run_dir(tmp_path, summary={"status": "finished", "steps": 3})
    kept = {"run_id": RUN["run_id"], "written": "earlier"}
    Path(d, "study_record.json").write_text(json.dumps(kept))
    assert finish_record(RUN, d, STUDY) == kept
    assert json.loads(Path(d, "study_record.json").read_text()) == kept
