"""Bounds of the commands' own flags on both sides: --shard I/N (0 <= I < N) and sample's --num (>= 1)."""
import pytest

from sapo_lab.cli import main


@pytest.mark.parametrize("command", [["study", "no_such_study.json"], ["replicate", "confirm_addition", "Q1"]])
@pytest.mark.parametrize("shard", ["2/2", "3/2"])
def test_a_shard_index_not_below_its_count_is_refused_in_one_line(command, shard, capsys):
    """Catches ``<=`` for ``<`` in the shard check: shard 2/2 names a process that would train no run."""
    assert main([*command, "--shard", shard]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --shard must be I/N with 0 <= I < N, got {shard!r}\n"


def test_the_last_shard_passes_the_check(capsys):
    """The other side of the bound: 1/2 is a valid shard, so the error comes later (the missing study)."""
    main(["study", "no_such_study.json", "--shard", "1/2"])
    assert "--shard" not in capsys.readouterr().err


@pytest.mark.parametrize("num", ["0", "-1"])
def test_sample_refuses_fewer_than_one_prompt_in_one_line(num, capsys):
    """Catches ``< 0`` for ``< 1`` in sample's --num check: --num 0 would print nothing and succeed."""
    assert main(["sample", "--config", "micro", "--num", num]) == 2
    assert capsys.readouterr().err == f"error: --num must be >= 1, got {num}\n"


def test_sample_accepts_one_prompt(tmp_path, capsys):
    """The other side: --num 1 passes its check, so the error is the missing model's, not --num's."""
    main(["sample", "--config", "micro", "--num", "1", "--model", str(tmp_path / "no_model")])
    assert "--num" not in capsys.readouterr().err
