"""Fault injection on the ``cpu-micro`` run: kills, damaged files, reused folders, changed keys.

One micro run is trained once (module fixture ``base``: 4 steps, checkpoints at steps 2
and 4) and copied for each case. Every refused command must print exactly one line,
``error: ...`` naming the file or key, exit 2, and leave the folder byte for byte as it
was; every accepted one must reproduce the uninterrupted run's metrics exactly.
"""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from _fault_driver import use_parity_reward
from _micro import micro_args, untimed_rows

import sapo_lab
from sapo_lab.cli import main
from sapo_lab.runs.checkpoint import select_checkpoint, verify_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(sapo_lab.__file__)))
DRIVER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_fault_driver.py")


def snapshot(path):
    """{relative path: SHA-256} of every file, plus every folder, under ``path``."""
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path) + "/"] = "dir"
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.relpath(os.path.join(root, f), path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture(autouse=True)
def _parity(monkeypatch):
    use_parity_reward(monkeypatch.setattr)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished micro run: metrics rows 1..4, checkpoints step-000002 and step-000004."""
    run = str(tmp_path_factory.mktemp("base") / "run")
    with pytest.MonkeyPatch.context() as mp:
        use_parity_reward(mp.setattr)
        assert main(["train", "--output-dir", run, *micro_args()]) == 0
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == ["latest.json", "step-000002", "step-000004"]
    # the parity reward reached the trainer: rewards vary, so the updates that resume must reproduce are not zero
    assert any(0 < r["rollout/reward_mean"] < 1 and r["optim/grad_norm"] > 0 for r in untimed_rows(run)), "every update was zero"
    return run


@pytest.fixture
def copy(base, tmp_path):
    dst = str(tmp_path / "run")
    shutil.copytree(base, dst)
    return dst


def cli(argv, capsys):
    """(exit code, stderr lines) of an in-process CLI call."""
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err
    return rc, [line for line in err.splitlines() if line.strip()]


def assert_refused(argv, capsys, folder, *needles):
    """Exit 2, exactly one ``error:`` line containing every needle, and ``folder`` unchanged."""
    before = snapshot(folder) if os.path.exists(folder) else None
    rc, err = cli(argv, capsys)
    assert rc == 2, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    for n in needles:
        assert n in err[0], (n, err[0])
    after = snapshot(folder) if os.path.exists(folder) else None
    assert after == before, "a refused command changed the folder"
    return err[0]


def resume(run, capsys, *extra):
    rc, err = cli(["train", "--resume", "--output-dir", run, *extra], capsys)
    assert rc == 0, err
    return err


def ckpt(run, step):
    return os.path.join(run, "checkpoints", f"step-{step:06d}")


# ---------------------------------------------------------------- damaged files


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _empty(path):
    open(path, "w").close()


def _flip_bit(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) - 100)  # inside the tensor data, past the header
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x10]))


@pytest.mark.parametrize(
    "name,damage,reason",
    [
        ("model.safetensors", _truncate, "model.safetensors has 29296 bytes, its manifest says 58592 (truncated)"),
        ("model.safetensors", _empty, "model.safetensors has 0 bytes"),
        ("model.safetensors", _flip_bit, "model.safetensors does not match its SHA-256"),
        ("optimizer.safetensors", _truncate, "optimizer.safetensors has"),
        ("optimizer.safetensors", _empty, "optimizer.safetensors has 0 bytes"),
        ("state.json", _truncate, "state.json has"),
        ("rng.safetensors", _flip_bit, "rng.safetensors does not match"),
    ],
)
def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(copy, base, capsys, name, damage, reason):
    damage(os.path.join(ckpt(copy, 4), name))
    damaged_bytes = open(os.path.join(ckpt(copy, 4), name), "rb").read()
    err = resume(copy, capsys)
    assert any(line.startswith("skipping checkpoint step-000004: ") and reason in line for line in err), err
    assert "resuming from the newest checkpoint that verifies: step-000002" in err
    assert "resumed" in err[-1] and "at step 2" in err[-1]
    assert untimed_rows(copy) == untimed_rows(base)  # steps 3 and 4 recomputed exactly from step 2
    final_eval = [json.load(open(os.path.join(r, "summary.json")))["final_eval"] for r in (copy, base)]
    assert final_eval[0] == final_eval[1]
    aside = os.path.join(copy, "checkpoints", "damaged-step-000004", name)
    assert open(aside, "rb").read() == damaged_bytes  # nothing deleted
    assert verify_checkpoint(ckpt(copy, 4)) == (True, None)  # rewritten, whole


@pytest.mark.parametrize("content", ["{}", ""])
def test_damaged_latest_json_is_named_and_ignored(copy, base, capsys, content):
    with open(os.path.join(copy, "checkpoints", "latest.json"), "w") as f:
        f.write(content)
    err = resume(copy, capsys)
    assert any(line.startswith("ignoring damaged ") and "checkpoints/latest.json (not a JSON object" in line for line in err), err
    assert "at step 4" in err[-1] and untimed_rows(copy) == untimed_rows(base)


def test_every_checkpoint_damaged_is_refused_naming_each(copy, capsys):
    _truncate(os.path.join(ckpt(copy, 4), "model.safetensors"))
    _empty(os.path.join(ckpt(copy, 2), "state.json"))
    assert_refused(
        ["train", "--resume", "--output-dir", copy],
        capsys,
        copy,
        "no checkpoint",
        "step-000004: model.safetensors has",
        "step-000002: state.json has 0 bytes",
    )


def test_half_written_last_metrics_line_is_dropped(copy, base, capsys):
    # Killed while writing row 4, before checkpoint 4: the row is half there, the checkpoint is not.
    shutil.rmtree(ckpt(copy, 4))
    path = os.path.join(copy, "metrics.jsonl")
    text = open(path).read()
    cut = text.rindex("\n", 0, len(text) - 1) + 40
    open(path, "w").write(text[:cut])
    err = resume(copy, capsys)
    assert any("metrics.jsonl: dropped a half-written last line" in line for line in err), err
    assert any("dropped 1 row(s) past the checkpoint's step 2" in line for line in err), err
    assert untimed_rows(copy) == untimed_rows(base)


def test_damaged_middle_metrics_line_is_refused(copy, capsys):
    path = os.path.join(copy, "metrics.jsonl")
    lines = open(path).read().splitlines(keepends=True)
    lines[1] = lines[1][:30] + "\n"
    open(path, "w").writelines(lines)
    assert_refused(["train", "--resume", "--output-dir", copy], capsys, copy, "metrics.jsonl line 2 is damaged")


def test_checkpoint_without_manifest_loads_with_an_explanation(copy, base, capsys):
    for step in (2, 4):
        os.remove(os.path.join(ckpt(copy, step), "manifest.json"))  # as written by sapo_lab before manifests
    os.remove(os.path.join(copy, "cold_start", "manifest.json"))
    _truncate(os.path.join(ckpt(copy, 4), "optimizer.safetensors"))  # caught by the structural check
    err = resume(copy, capsys)
    assert any(line.startswith("skipping checkpoint step-000004: optimizer.safetensors cannot be read") for line in err), err
    assert any("step-000002 has no manifest.json (written by an older sapo_lab)" in line for line in err), err
    assert untimed_rows(copy) == untimed_rows(base)


def test_damaged_cold_start_is_refused(copy, capsys):
    _flip_bit(os.path.join(copy, "cold_start", "model.safetensors"))
    assert_refused(
        ["train", "--resume", "--output-dir", copy], capsys, copy, "cold_start: model.safetensors does not match its SHA-256"
    )


def test_model_folder_without_tokenizer_is_a_one_line_error(base, tmp_path, capsys):
    folder = str(tmp_path / "model")
    os.makedirs(folder)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(base, "final_model", name), folder)
    assert_refused(["eval", "--model", folder, *micro_args()], capsys, folder, "has no tokenizer", folder)
    out = str(tmp_path / "out")
    assert_refused(["train", "--model", folder, "--output-dir", out, *micro_args()], capsys, folder, "has no tokenizer")


def test_flipped_bit_in_a_saved_model_folder_is_caught_at_load(copy, capsys):
    model = os.path.join(copy, "final_model")
    _flip_bit(os.path.join(model, "model.safetensors"))
    assert_refused(["eval", "--model", model, *micro_args()], capsys, copy, "model.safetensors does not match its SHA-256")


# ---------------------------------------------------------------- reused folders


def test_folder_with_a_users_files_is_refused_then_overwritten_on_request(base, tmp_path, capsys):
    run = str(tmp_path / "mine")
    os.makedirs(run)
    for name, text in (("config.json", '{"my": "settings"}'), ("metrics.jsonl", '{"a": 1}\n'), ("notes.txt", "keep me")):
        open(os.path.join(run, name), "w").write(text)
    argv = ["train", "--output-dir", run, *micro_args()]
    assert_refused(argv, capsys, run, "is not empty and is not a sapo_lab run", "config.json", "notes.txt", "--overwrite")
    rc, err = cli([*argv, "--overwrite"], capsys)
    assert rc == 0
    assert any(line.startswith("--overwrite: removed config.json, metrics.jsonl") and "kept notes.txt" in line for line in err)
    assert open(os.path.join(run, "notes.txt")).read() == "keep me"
    assert untimed_rows(run) == untimed_rows(base)


def test_leftover_checkpoints_of_another_run_are_refused_then_removed_on_overwrite(copy, base, capsys):
    argv = ["train", "--output-dir", copy, *micro_args(seed=1)]
    assert_refused(argv, capsys, copy, "already holds a run")  # finished
    os.remove(os.path.join(copy, "summary.json"))
    assert_refused(argv, capsys, copy, "already holds a run of another config: seed (saved 0, requested 1)")
    os.remove(os.path.join(copy, "config.json"))  # only step-* folders and metrics left
    assert_refused(argv, capsys, copy, "already holds a run's files but no config.json")
    rc, err = cli([*argv, "--overwrite"], capsys)
    assert rc == 0, err
    got = untimed_rows(copy)
    assert [r["step"] for r in got] == [1, 2, 3, 4] and got != untimed_rows(base)  # seed 1's own rows
    state = json.load(open(os.path.join(ckpt(copy, 2), "state.json")))
    assert state["config"]["seed"] == 1  # the old run's checkpoint did not survive into the new one


def test_same_config_with_a_checkpoint_asks_for_resume(copy, capsys):
    os.remove(os.path.join(copy, "summary.json"))
    assert_refused(["train", "--output-dir", copy, *micro_args()], capsys, copy, "stopped at step-000004", "--resume")


def test_same_config_killed_before_its_first_checkpoint_starts_again(copy, base, capsys):
    for name in ("checkpoints", "final_model", "summary.json"):
        p = os.path.join(copy, name)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    os.makedirs(os.path.join(copy, "cold_start.tmp-999"))  # a half-written cold start
    rc, err = cli(["train", "--output-dir", copy, *micro_args()], capsys)
    assert rc == 0, err
    assert any("stopped before its first checkpoint: starting it again" in line for line in err), err
    assert any("removed 1 half-written leftover" in line for line in err), err
    assert untimed_rows(copy) == untimed_rows(base) and not os.path.exists(os.path.join(copy, "cold_start.tmp-999"))


def test_output_dir_that_is_a_file_and_contradictory_flags(tmp_path, copy, capsys):
    f = str(tmp_path / "file")
    open(f, "w").write("x")
    assert_refused(["train", "--output-dir", f, *micro_args()], capsys, f, "is a file")
    assert_refused(["train", "--resume", "--overwrite", "--output-dir", copy], capsys, copy, "contradict")


# ---------------------------------------------------------------- resume with changed keys


def test_resume_may_extend_max_steps(copy, base, capsys):
    err = resume(copy, capsys, "--max_steps", "6")
    assert "--resume changes optimization.max_steps: 4 -> 6" in err
    got = untimed_rows(copy)
    assert [r["step"] for r in got] == [1, 2, 3, 4, 5, 6] and got[:4] == untimed_rows(base)
    assert json.load(open(os.path.join(copy, "config.json")))["optimization"]["max_steps"] == 6
    assert json.load(open(os.path.join(copy, "summary.json")))["steps"] == 6
    kept = open(os.path.join(copy, "summary.step-000004.json")).read()
    assert kept == open(os.path.join(base, "summary.json")).read()  # the earlier result is kept
    assert json.loads(open(os.path.join(copy, "resumes.jsonl")).read()) == {
        "step": 4,
        "changes": {"optimization.max_steps": [4, 6]},
    }


def test_resume_may_set_a_time_limit_and_repeat_saved_values(copy, base, capsys):
    err = resume(copy, capsys, "--max_train_time_s", "100", "--seed", "0", "--loss_type", "sapo")
    assert "--resume changes max_train_time_s: 0.0 -> 100.0" in err
    assert json.load(open(os.path.join(copy, "config.json")))["max_train_time_s"] == 100.0
    assert untimed_rows(copy) == untimed_rows(base)


@pytest.mark.parametrize(
    "extra,needles",
    [
        (
            ["--loss_type", "grpo", "--learning_rate", "0.5"],
            ["loss.loss_type (saved 'sapo', requested 'grpo')", "optimization.learning_rate (saved 0.01, requested 0.5)"],
        ),
        (["--model", "cpu-tiny"], ["model.name_or_path (saved 'cpu-micro', requested 'cpu-tiny')"]),
        (["--num_generations", "2"], ["rollout.num_generations (saved 4, requested 2)"]),
        (["--max_steps", "3"], ["optimization.max_steps=3 is below the checkpoint's step 4"]),
    ],
)
def test_resume_refuses_other_changes_naming_key_and_values(copy, capsys, extra, needles):
    assert_refused(["train", "--resume", "--output-dir", copy, *extra], capsys, copy, *needles)


def test_resume_with_the_preset_named_compares_only_what_it_sets(copy, base, capsys):
    # cpu-tiny sets threads=1 (as saved) and max_train_time_s=290 (saved: 0, a resumable key); the
    # micro run's other keys differ from cpu-tiny's defaults and must not count as requested changes.
    err = resume(copy, capsys, "--config", "cpu-tiny")
    assert "--resume changes max_train_time_s: 0.0 -> 290.0" in err
    assert not any("changes" in line and "max_train_time_s" not in line for line in err), err
    assert untimed_rows(copy) == untimed_rows(base)


def test_resume_with_another_config_file_compares_all_of_it(copy, tmp_path, capsys):
    data = json.load(open(os.path.join(copy, "config.json")))
    data["seed"] = 5
    other = str(tmp_path / "other.json")
    json.dump(data, open(other, "w"))
    assert_refused(["train", "--resume", "--config", other, "--output-dir", copy], capsys, copy, "seed (saved 0, requested 5)")


# ---------------------------------------------------------------- divergence


def test_divergence_after_a_checkpoint_keeps_it_and_resume_continues(base, tmp_path, capsys, monkeypatch):
    import torch

    from sapo_lab.training.trainer import Trainer

    real_step = Trainer.train_step

    def poisoned(self):
        row = real_step(self)
        if self.step == 3:  # after checkpoint 2 and row 3: the next step sees NaN weights
            with torch.no_grad():
                next(self.model.parameters()).fill_(float("nan"))
        return row

    run = str(tmp_path / "run")
    monkeypatch.setattr(Trainer, "train_step", poisoned)
    rc, err = cli(["train", "--output-dir", run, *micro_args()], capsys)
    assert rc == 1
    assert err[-1].startswith("error: training diverged at step 4") and err[-1].endswith("step-000002"), err
    assert select_checkpoint(run) == (ckpt(run, 2), [], True)  # it verifies
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == ["latest.json", "step-000002"]
    assert untimed_rows(run) == untimed_rows(base)[:3]  # row 3 was finite and stays until the resume recomputes it
    assert not os.path.exists(os.path.join(run, "summary.json")) and not os.path.exists(os.path.join(run, "final_model"))
    monkeypatch.setattr(Trainer, "train_step", real_step)
    resume(run, capsys)
    assert untimed_rows(run) == untimed_rows(base)


# ---------------------------------------------------------------- kills (subprocesses)


def _spawn(args, env_extra=None):
    env = {**os.environ, "PYTHONPATH": ROOT, **(env_extra or {})}
    return subprocess.Popen([sys.executable, DRIVER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow
def test_sigkill_while_a_checkpoint_is_written(base, tmp_path, capsys):
    run = str(tmp_path / "run")
    proc = _spawn(["train", "--output-dir", run, *micro_args()], {"SAPO_FAULT_KILL_AT": "rng.safetensors@4"})
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    leftovers = [n for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith(".tmp-step-000004-")]
    assert len(leftovers) == 1  # model and optimizer written, the rest not: never renamed into place
    assert select_checkpoint(run)[0] == ckpt(run, 2)
    err = resume(run, capsys)
    assert any(line.startswith("removed 1 half-written leftover") and ".tmp-step-000004-" in line for line in err), err
    assert untimed_rows(run) == untimed_rows(base)
    assert not [n for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith(".tmp")]


def _kill_at_random(run, sig, rng):
    """Start a run (checkpoint every step), wait until training has begun, then send ``sig`` at a random moment."""
    proc = _spawn(["train", "--output-dir", run, *micro_args(save_steps=1)])
    metrics = os.path.join(run, "metrics.jsonl")
    deadline = time.monotonic() + 240
    while not os.path.exists(metrics) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.4))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    if proc.returncode not in (-sig, 0):  # the run failed on its own before the signal: show why
        print(err if isinstance(err, str) else (err or b"").decode(errors="replace"))
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_sigkill_at_a_random_moment_then_resume_reproduces(base, tmp_path, capsys, trial):
    rng = random.Random(trial)
    run = str(tmp_path / "run")
    rc = _kill_at_random(run, signal.SIGKILL, rng)
    assert rc in (-signal.SIGKILL, 0)  # 0: the run finished before the signal
    if rc == 0:
        return
    if select_checkpoint(run)[0] is None:  # killed before its first checkpoint: start it again
        rc, err = cli(["train", "--output-dir", run, *micro_args(save_steps=1)], capsys)
        assert rc == 0 and any("starting it again" in line for line in err), err
    else:
        resume(run, capsys)
    assert untimed_rows(run) == untimed_rows(base)  # save_steps changes no number
    assert not [n for n in os.listdir(os.path.join(run, "checkpoints")) if n.startswith(".tmp")]


@pytest.mark.slow
def test_sigint_checkpoints_and_exits_130_then_resume_reproduces(base, tmp_path, capsys):
    run = str(tmp_path / "run")
    rc = _kill_at_random(run, signal.SIGINT, random.Random(7))
    if rc == -signal.SIGINT:  # on a fast machine the run can finish first; Ctrl-C then lands in interpreter teardown
        assert os.path.exists(os.path.join(run, "summary.json")), "killed by SIGINT before the run had finished"
        rc = 0
    assert rc in (130, 0)
    if rc == 130:
        assert not os.path.exists(os.path.join(run, "summary.json"))
        if select_checkpoint(run)[0] is None:  # Ctrl-C landed before the loop's handler: no step to keep
            rc, err = cli(["train", "--output-dir", run, *micro_args(save_steps=1)], capsys)
            assert rc == 0 and any("starting it again" in line for line in err), err
        else:
            assert select_checkpoint(run)[2] is True  # the checkpoint Ctrl-C wrote verifies
            resume(run, capsys)
    assert untimed_rows(run) == untimed_rows(base)


# ---------------------------------------------------------------- durability


def test_checkpoint_files_are_fsynced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    import torch

    import sapo_lab.runs.checkpoint as ck
    from sapo_lab.training.model import build_model

    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", src, dst))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    model = build_model("cpu-micro", vocab_size=15)
    final = ck.save_checkpoint(str(tmp_path), 3, model, torch.optim.AdamW(model.parameters()), {}, {})
    i = next(k for k, e in enumerate(events) if e[0] == "rename" and e[2] == final)
    tmp = events[i][1]
    synced_before = {e[1] for e in events[:i] if e[0] == "fsync"}
    for name in os.listdir(final):
        path = os.path.join(tmp, name)
        assert path in synced_before or path + ".tmp" in synced_before, name  # JSON: fsynced, then replaced
    assert tmp in synced_before  # the folder's entries, before it is renamed
    assert ("fsync", os.path.dirname(final)) in events[i + 1 :]  # the rename itself
    manifest = json.load(open(os.path.join(final, "manifest.json")))["files"]
    assert sorted(manifest) == sorted(set(os.listdir(final)) - {"manifest.json"})
