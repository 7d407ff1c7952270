"""--shard I/N on both sides of its bound (0 <= I < N), for the study and replicate commands."""
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
