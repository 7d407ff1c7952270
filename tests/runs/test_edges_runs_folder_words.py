"""The run folder's counted words and limits, each against a line typed here: how many differing keys and
foreign files a refusal lists before "and N more", a torn last metrics row followed by its newline, and
adam_beta2's open upper end. Folders are written by hand; nothing is trained."""

import os

import pytest

from sapo_lab.runs.config import load_config
from sapo_lab.runs.run_folder import RunDirError, read_metrics
from sapo_lab.runs.run_policy import prepare

HINT = "; pass --overwrite to replace it or choose another --output-dir"

# four keys that differ from the saved micro run, in the order the refusal sorts them (dotted names, alphabetical)
CHANGES = [("loss.loss_type", "'sapo'", "'grpo'"), ("optimization.learning_rate", "0.0002", "0.001"),
           ("rollout.temperature", "1.0", "0.5"), ("seed", "0", "7")]
OVERRIDES = {"loss_type": "grpo", "learning_rate": 1e-3, "temperature": 0.5, "seed": 7}


@pytest.mark.parametrize("count", [3, 4])
def test_a_refusal_lists_three_changed_keys_then_counts_the_rest(tmp_path, count):
    """Three differing keys are all named with no "and 0 more"; a fourth is counted as "and 1 more". Catches
    ``>=`` for ``>`` at the list's limit, and the count taken against another limit."""
    run = tmp_path / "run"
    run.mkdir()
    load_config("micro").save(str(run / "config.json"))
    chosen = dict(list(OVERRIDES.items())[:count])
    with pytest.raises(RunDirError) as refused:
        prepare(str(run), load_config("micro", chosen), log=lambda m: None)
    named = ", ".join(f"{k} (saved {s}, requested {r})" for k, s, r in CHANGES[:3])
    more = " and 1 more" if count == 4 else ""
    assert str(refused.value) == f"run directory {run} already holds a run of another config: {named}{more}{HINT}"


@pytest.mark.parametrize(("names", "listed"), [
    (["a.txt", "b.txt", "c.txt", "d.txt"], "a.txt, b.txt, c.txt, d.txt"),
    (["a.txt", "b.txt", "c.txt", "d.txt", "e.txt", "f.txt"], "a.txt, b.txt, c.txt, d.txt and 2 more"),
])
def test_a_foreign_folder_names_four_files_then_counts_the_rest(tmp_path, names, listed):
    """Catches the count of the unnamed files taken from another limit than the four named (6 files: 2 more)."""
    for name in names:
        (tmp_path / name).write_text("mine")
    with pytest.raises(RunDirError) as refused:
        prepare(str(tmp_path), load_config("micro"), log=lambda m: None)
    assert str(refused.value) == (f"output directory {tmp_path} is not empty and is not a sapo_lab run "
                                  f"(found {listed}){HINT}")


def test_a_torn_last_row_is_left_out_even_with_its_newline(tmp_path):
    """The last non-blank line is the torn one even when the file ends with a newline (the row's text was cut,
    its newline written). Catches the torn row looked for on the file's very last line (the empty one after the
    newline), which calls the run damaged and blocks --resume."""
    path = os.path.join(tmp_path, "metrics.jsonl")
    with open(path, "w") as f:
        f.write('{"step": 1}\n{"step": 2, "x"\n\n')
    log = read_metrics(path)
    assert [r["step"] for r in log.rows] == [1] and log.torn_last_line


def test_adam_beta2_is_below_one():
    """Catches the upper end of adam_beta2 made inclusive (beta2 = 1: the second moment never updates)."""
    with pytest.raises(ValueError) as refused:
        load_config("micro", {"adam_beta2": 1})
    assert str(refused.value) == "config key 'optimization.adam_beta2' = 1 is invalid: must be < 1"
    assert load_config("micro", {"adam_beta2": 0.999}).optimization.adam_beta2 == 0.999


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory):
    """Two finished two-step micro runs with a checkpoint at step 2, one per learning-rate schedule."""
    from _micro import QUIET, micro

    from sapo_lab.training.trainer import train

    runs = {}
    for schedule in ("linear", "constant_with_warmup"):
        run = str(tmp_path_factory.mktemp(schedule))
        train(micro(max_steps=2, lr_scheduler_type=schedule), run, **QUIET)
        runs[schedule] = run
    return runs


def _resume(run, schedule, max_steps):
    from _micro import micro

    said = []
    cfg = micro(max_steps=max_steps, lr_scheduler_type=schedule)
    prepared = prepare(run, cfg, resume=True, resume_keys=["max_steps"], log=said.append)
    return prepared, said


@pytest.mark.parametrize(("schedule", "noted"), [("linear", True), ("constant_with_warmup", False)])
def test_a_longer_resume_notes_a_schedule_that_depends_on_max_steps(stopped_runs, schedule, noted):
    """A linear schedule decays toward max_steps, so training longer changes the steps still to come; a constant
    one after its warmup does not. Catches the note given for the wrong schedule (or for none)."""
    _, said = _resume(stopped_runs[schedule], schedule, 5)
    note = (f"note: the {schedule} learning-rate schedule of the remaining steps follows the new max_steps, so this "
            "run differs from one started with it")
    assert (note in said) is noted
    assert "--resume changes optimization.max_steps: 2 -> 5" in said


def test_resume_may_keep_max_steps_at_the_checkpoints_step_but_not_below(stopped_runs):
    """The checkpoint is at step 2: max_steps 2 resumes (nothing left to train, the run's end is kept), 1 is
    refused. Catches ``<=`` for ``<`` ("never below the checkpoint's step")."""
    run = stopped_runs["linear"]
    prepared, _ = _resume(run, "linear", 2)
    assert prepared.checkpoint.endswith("step-000002") and prepared.cfg.optimization.max_steps == 2
    with pytest.raises(RunDirError, match=r"^--resume: optimization.max_steps=1 is below the checkpoint's step 2$"):
        _resume(run, "linear", 1)
