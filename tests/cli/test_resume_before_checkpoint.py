"""``--resume`` on a run stopped before its first checkpoint (Ctrl-C during the cold start) is one line that says
what happened and what to type instead, and that advice works."""

from sapo_lab.cli import main
from sapo_lab.runs.config import load_config
from sapo_lab.runs.run_policy import prepare
from sapo_lab.training import lifecycle


def _ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


def test_resume_after_ctrl_c_in_the_cold_start_says_to_start_again(tmp_path, monkeypatch, capsys):
    # Catches the raw "cold_start_eval.json cannot be read ([Errno 2] ...)" message this case used to print, a
    # message that names no way out, and one that spills a traceback or a second line.
    monkeypatch.chdir(tmp_path)
    run = ["train", "--config", "micro", "--device", "cpu", "--output-dir", "run"]
    with monkeypatch.context() as m:
        m.setattr(lifecycle, "get_cold_start", _ctrl_c)  # Ctrl-C while the cold start trains
        assert main(run) == 130
    assert (tmp_path / "run" / "config.json").is_file()
    assert not (tmp_path / "run" / "cold_start_eval.json").exists()
    capsys.readouterr()
    assert main([*run, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "Errno" not in err, err
    assert "stopped before its first checkpoint" in err and "without --resume" in err, err
    # The advice holds: without --resume the folder is accepted and the run starts again (the policy's
    # decision alone, not the whole run: catches a folder that both commands refuse).
    said = []
    prepare(str(tmp_path / "run"), load_config("micro", {"device": "cpu"}), log=said.append)
    assert any("starting it again" in line for line in said), said
