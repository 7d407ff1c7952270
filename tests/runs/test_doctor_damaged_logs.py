"""`python -m sapo_lab doctor` on logs an outside tester made by hand: a garbage metrics.jsonl is damaged (not a run
without steps), a log without token counts is incomplete (not "no token trained"), and `doctor RUN | head -1` ends
quietly."""

import json
import os
import subprocess
import sys

from sapo_lab.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACTIVE_ROW = {"ratio/q01": 0.9, "ratio/q99": 1.2, "ratio/max_abs_log_ratio": 0.4,
              "losses/signal_removed_frac": 0.03, "rollout/reward_mean": 0.5}


def _run_dir(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.mkdir()
    (path / "metrics.jsonl").write_text(text)
    return str(path)


def _one_line_exit_2(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    return err


def test_a_garbage_metrics_file_is_damaged(tmp_path, capsys):
    """Catches a file whose only line is not JSON read as a torn append of a run yet to log ('no logged training
    step'), which sends the user to wait for a run that will never log."""
    err = _one_line_exit_2(["doctor", _run_dir(tmp_path, "garbage", "garbage\n")], capsys)
    assert "is damaged" in err and "no logged training step" not in err, err


def test_an_empty_metrics_file_is_still_a_run_without_steps(tmp_path, capsys):
    """The control: an empty log is a run that has not logged yet (catches every unreadable log called damaged)."""
    err = _one_line_exit_2(["doctor", _run_dir(tmp_path, "empty", "")], capsys)
    assert "no logged training step" in err, err


def test_a_log_without_token_counts_is_not_read_as_no_token_trained(tmp_path, capsys):
    """A ratio quantile but no max |log r|, no token count and no zero-spread share: catches the doctor asserting
    'no token trained ... every group's rewards agreed' from keys that are merely absent."""
    text = json.dumps({"step": 1, "ratio/q01": 0.9}) + "\n" + '{"step": 2, "ra'
    err = _one_line_exit_2(["doctor", _run_dir(tmp_path, "half", text)], capsys)
    assert "no token trained" not in err and "token counts" in err and "missing" in err, err


def test_a_log_whose_token_counts_are_zero_is_no_token_trained(tmp_path, capsys):
    """The control: optim/tokens_trained = 0 on every step shows it (catches the evidence check refusing it)."""
    rows = [{"step": s, "ratio/q01": None, "ratio/max_abs_log_ratio": 0.0, "optim/tokens_trained": 0} for s in (1, 2)]
    run = _run_dir(tmp_path, "zero", "".join(json.dumps(r) + "\n" for r in rows))
    assert main(["doctor", run]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verdict: no token trained") and "optim/tokens_trained is 0 on every step" in out, out


def test_doctor_into_a_closed_pipe_ends_quietly(tmp_path):
    """`doctor RUN | head -1`: catches a BrokenPipeError traceback (exit 1) when the reader has gone."""
    run = _run_dir(tmp_path, "active", "".join(json.dumps({"step": s, **ACTIVE_ROW}) + "\n" for s in range(1, 6)))
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "sapo_lab", "doctor", run], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=str(tmp_path))
    proc.stdout.close()  # the reader is gone before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err
