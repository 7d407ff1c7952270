"""Wiring of the runs layer observed directly: fsync before rename on every durable path, the resume
policy's set of changeable keys as a whole, and both ends of every numeric bound of the config.

Each test names the deliberate mistake it catches; the tables here are written out by hand on purpose,
so that a bound or a resumable key changed in the code (not only one whose check broke) is noticed.
"""

import json
import os

import pytest

from sapo_lab.runs import durable
from sapo_lab.runs.checkpoint import CHECKPOINT_FILES
from sapo_lab.runs.config import config_from_dict, leaf_keys, load_config
from sapo_lab.runs.config_paths import flatten_config as flatten
from sapo_lab.runs.manifest import write_manifest
from sapo_lab.runs.run_folder import RESUMABLE, RunDirError, RunFolder, step_dir_name
from sapo_lab.runs.run_policy import prepare
from sapo_lab.runs.study_folder import StudyFolder

# ---------------------------------------------------------------- fsync before rename


@pytest.fixture
def events(monkeypatch):
    """Every fsync (the path it flushed) and rename, in order."""
    found = []
    real_fsync, real_replace, real_rename = os.fsync, os.replace, os.rename

    def fsync(fd):
        found.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        found.append(("rename", os.fspath(src), os.fspath(dst)))
        return real_replace(src, dst)

    def rename(src, dst):
        found.append(("rename", os.fspath(src), os.fspath(dst)))
        return real_rename(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "rename", rename)
    return found


def assert_durable(events, dst: str) -> None:
    """The rename onto ``dst``: its source (a file, or a folder and every file in it) fsynced before,
    the parent folder fsynced after."""
    dst = os.path.abspath(dst)
    i = next(k for k, e in enumerate(events) if e[0] == "rename" and os.path.abspath(e[2]) == dst)
    src = os.path.abspath(events[i][1])
    before = {e[1] for e in events[:i] if e[0] == "fsync"}
    after = {e[1] for e in events[i + 1:] if e[0] == "fsync"}
    assert src in before, f"{src} renamed onto {dst} before it was fsynced"
    if os.path.isdir(dst):
        for name in os.listdir(dst):
            assert os.path.join(src, name) in before or os.path.join(src, name) + durable.TMP_SUFFIX in before, name
    assert os.path.dirname(dst) in after, f"{os.path.dirname(dst)} not fsynced after the rename"


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, events):
    """Catches fsync moved after os.replace in atomic_write (a power cut could then leave an empty file)."""
    durable.atomic_write(str(tmp_path / "a.json"), "{}")
    assert_durable(events, str(tmp_path / "a.json"))


def test_install_fsyncs_the_file_before_the_rename(tmp_path, events):
    """Catches install() renaming a library-written file before flushing it (study snapshots use it)."""
    (tmp_path / "w.tmp").write_bytes(b"weights")
    durable.install(str(tmp_path / "w.tmp"), str(tmp_path / "w"))
    assert_durable(events, str(tmp_path / "w"))


def test_move_fsyncs_both_folders_whose_entries_changed(tmp_path, events):
    """Catches move() fsyncing only one side of a cross-folder rename (the damaged-checkpoint set-aside)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "f").write_text("x")
    durable.move(str(tmp_path / "a" / "f"), str(tmp_path / "b" / "f"))
    i = next(k for k, e in enumerate(events) if e[0] == "rename")
    after = {e[1] for e in events[i + 1:] if e[0] == "fsync"}
    assert {str(tmp_path / "a"), str(tmp_path / "b")} <= after


def test_append_line_fsyncs_the_log_and_a_new_logs_folder(tmp_path, events):
    """Catches a metrics row reported written before it is on the disk."""
    path = str(tmp_path / "log.jsonl")
    durable.append_line(path, "{}\n")
    assert ("fsync", path) in events and ("fsync", str(tmp_path)) in events


def test_the_cold_start_folder_is_fsynced_before_it_is_renamed_into_place(tmp_path, events):
    """Catches save_pretrained_atomic renaming the folder before its files (and manifest) are flushed."""
    from sapo_lab.training.cold_start import save_pretrained_atomic
    from sapo_lab.training.model import build_model
    from sapo_lab.training.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer("0123456789+=")
    model = build_model("cpu-micro", vocab_size=len(tok))
    save_pretrained_atomic(model, tok, str(tmp_path / "cold_start"), extra={"cold_start.json": {"key": "k"}})
    assert_durable(events, str(tmp_path / "cold_start"))


def test_a_study_snapshot_is_fsynced_before_it_is_renamed(tmp_path, events):
    """Catches save_snapshot writing the weights in place, or renaming them unflushed."""
    from sapo_lab.runs.snapshots import save_snapshot
    from sapo_lab.training.model import build_model

    save_snapshot(str(tmp_path), 3, build_model("cpu-micro", vocab_size=15))
    path = os.path.join(RunFolder(str(tmp_path)).snapshots, step_dir_name(3), "model.safetensors")
    assert_durable(events, path)


def test_every_study_file_is_written_durably(tmp_path, events):
    """Catches a study file (declaration, summary table, record, wall time) written with a plain open()."""
    study = StudyFolder(str(tmp_path / "s"))
    study.start()
    study.write_declaration({"name": "s"})
    study.write_summary([{"run_id": "r"}], "run_id\nr\n")
    study.append_invocation({"argv": []})
    run = study.run("r")
    os.makedirs(run.path)
    run.write_record({"run_id": "r"})
    run.write_diverged("nan", 3)
    run.append_wall("started", 1.5)
    for path in (study.declaration, study.summary, study.summary_csv, study.environment, run.record, run.diverged,
                 run.wall, study.file(".gitignore")):
        assert_durable(events, path)
    assert run.read_wall() == [{"action": "started", "wall_s": 1.5}] and run.read_diverged() == {"error": "nan", "step": 3}


# ---------------------------------------------------------------- the resume policy's changeable keys


# What --resume may change, as a whole: a key added here would let a resumed run silently become another run.
CHANGEABLE = {"optimization.max_steps", "max_train_time_s", "save_steps", "threads",
              "evaluation.gradient_comparison_every"}


def _resumable_folder(path, cfg) -> str:
    """A run folder that resume accepts, stopped at step 2 (files made by hand: the policy reads names and
    manifests, not weights)."""
    folder = RunFolder(str(path))
    os.makedirs(folder.cold_start)
    folder.write_config(cfg)
    folder.write_cold_start_eval({"cold_start": {"key": "k"}})
    (path / "cold_start" / "model.safetensors").write_bytes(b"weights")
    write_manifest(folder.cold_start)
    ckpt = os.path.join(folder.checkpoints, step_dir_name(2))
    os.makedirs(ckpt)
    for name in CHECKPOINT_FILES:
        with open(os.path.join(ckpt, name), "w") as f:
            f.write(json.dumps({"step": 2}) if name == "state.json" else "{}")
    write_manifest(ckpt)
    folder.start_metrics()
    return folder.path


def _another_value(key: str, value, data: dict):
    """A value for ``key`` that differs from ``value`` and that the config accepts."""
    by_key = {"loss.loss_type": "grpo", "device": "cpu", "model.name_or_path": "cpu-tiny", "task.name": "suite",
              "loss.importance_sampling_level": "token", "loss.aggregation": "token_pool",
              "loss.max_log_ratio_policy": "skip", "optimization.lr_scheduler_type": "linear",
              "cold_start.cache_dir": "elsewhere", "task.options": {"max_digits": 1}, "evaluation.pass_k": [1]}
    if key in by_key:
        candidates = [by_key[key]]
    elif isinstance(value, bool):
        candidates = [not value]
    elif isinstance(value, int):
        candidates = [value + 1, value - 1]
    elif isinstance(value, float):
        candidates = [value / 2 if value else 0.5, value + 0.1]
    else:  # None: an optional number
        candidates = [0.3]
    for new in candidates:
        section, _, leaf = key.rpartition(".")
        changed = json.loads(json.dumps(data))
        (changed[section] if section else changed)[leaf] = new
        try:
            return config_from_dict(changed)
        except ValueError:
            continue
    raise AssertionError(f"no other valid value tried for {key}")


def test_resume_changes_exactly_the_declared_keys(tmp_path):
    """Every leaf key, changed on --resume: refused unless it is in the declared set. Catches a key added to or
    dropped from RESUMABLE, and a refusal that checks the wrong keys (the first only, say)."""
    cfg = load_config("micro")
    run = _resumable_folder(tmp_path / "run", cfg)
    assert set(RESUMABLE) == CHANGEABLE
    data = cfg.to_dict()
    flat = flatten(data)
    flat["task.options"] = data["task"]["options"]
    accepted = set()
    for key in leaf_keys():
        other = _another_value(key, flat[key], data)
        try:
            prepared = prepare(run, other, resume=True, log=lambda m: None)  # every key compared
        except RunDirError as exc:
            assert f"--resume cannot change {key}" in str(exc), (key, str(exc))  # task.options: its option named
            continue
        assert [c[0] for c in prepared.changes] == [key] and prepared.cfg.to_dict() == other.to_dict()
        accepted.add(key)
    assert accepted == CHANGEABLE
    assert os.listdir(os.path.join(run, "checkpoints")) == [step_dir_name(2)]  # refusing or preparing writes nothing


# ---------------------------------------------------------------- numeric bounds, both ends

# key: (lower, lower included, upper, upper included); None where there is no bound.
BOUNDS = {
    "task.num_train": (1, True, None, None),
    "task.num_dev": (1, True, None, None),
    "task.num_eval": (1, True, None, None),
    "cold_start.max_updates": (0, True, None, None),
    "cold_start.batch_size": (1, True, None, None),
    "cold_start.sft_learning_rate": (0, False, None, None),
    "cold_start.target_pass1": (0, True, 1, True),
    "cold_start.eval_every": (1, True, None, None),
    "rollout.prompts_per_rollout": (1, True, None, None),
    "rollout.num_generations": (2, True, None, None),
    "rollout.max_completion_length": (1, True, None, None),
    "rollout.temperature": (0, False, None, None),
    "optimization.max_steps": (0, True, None, None),
    "optimization.learning_rate": (0, False, None, None),
    "optimization.warmup_steps": (0, True, None, None),
    "optimization.weight_decay": (0, True, None, None),
    "optimization.adam_beta1": (0, True, 1, False),
    "optimization.adam_beta2": (0, True, 1, False),
    "optimization.max_grad_norm": (0, True, None, None),
    "optimization.beta": (0, True, None, None),
    "loss.sapo_temperature_pos": (0, False, None, None),
    "loss.sapo_temperature_neg": (0, False, None, None),
    "loss.epsilon": (0, False, 1, False),
    "loss.epsilon_high": (0, False, None, None),
    "loss.max_log_ratio": (0, False, None, None),
    "evaluation.dev_every": (1, True, None, None),
    "evaluation.dev_prompts": (1, True, None, None),
    "evaluation.num_samples": (1, True, None, None),
    "evaluation.eval_temperature": (0, True, None, None),
    "evaluation.gradient_comparison_every": (0, True, None, None),
    "save_steps": (1, True, None, None),
    "max_train_time_s": (0, True, None, None),
    "threads": (0, True, None, None),
}


def _accepted(key: str, value) -> bool:
    # pass_k must fit num_samples, and K minibatches the rollout: give those rules room
    room = {"evaluation.pass_k": [1], "optimization.steps_per_generation": 1}
    try:
        load_config("micro", {**room, key: value})
        return True
    except ValueError as exc:
        assert key in str(exc), (key, str(exc))  # the message names the key
        return False


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_each_numeric_bound_holds_at_both_ends(key):
    """At each bound: the bound itself accepted exactly when it is included, a step beyond refused, a step
    inside accepted. Catches ``lt=1`` turned into ``le=1`` (an Adam beta of 1 never forgets), a bound dropped,
    or one end checked and not the other."""
    lo, lo_in, hi, hi_in = BOUNDS[key]
    integer = isinstance(flatten(load_config("micro").to_dict())[key], int)
    step = 1 if integer else 1e-6
    if lo is not None:
        assert _accepted(key, lo) == lo_in
        assert not _accepted(key, lo - step)
        assert _accepted(key, lo + step)
    if hi is not None:
        assert _accepted(key, hi) == hi_in
        assert not _accepted(key, hi + step)
        assert _accepted(key, hi - step)


def test_every_numeric_key_has_its_bounds_listed():
    """A numeric key added to the config without a row here (or a row for a key that is gone) is noticed."""
    data = flatten(load_config("micro").to_dict())
    numeric = {k for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    numeric |= {"loss.epsilon_high", "evaluation.eval_temperature"}  # optional numbers, None by default
    unbounded = {"task.split_seed", "seed", "optimization.steps_per_generation"}  # any int; K checked against N
    assert numeric - unbounded == set(BOUNDS)
