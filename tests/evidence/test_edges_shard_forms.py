"""The shard count read from a replication's recorded command lines, in both spellings argparse accepts."""

import pytest

from sapo_lab.evidence import decision


@pytest.mark.parametrize(("first", "second", "count"), [
    (["--shard", "0/3"], ["--shard", "2/3"], 3),   # the separate-token form the committed runs used
    (["--shard=0/3"], ["--shard=2/3"], 3),          # the joined form: the same three shards
    (["--shard", "0/3"], ["--shard=1/3"], 3),       # one of each
    (["--shard=0/3"], ["--shard=1/2"], 0),          # two different totals: no single count
    (["--shard=0/3"], [], 0),                       # one invocation without a shard
    (["--shard"], ["--shard", "1/2"], 0),           # a flag with no value
])
def test_both_spellings_of_the_shard_flag_are_read(first, second, count):
    """Catches ``--shard=i/N`` not recognised (the history then says "its invocations" for three shards) and a
    mixed or incomplete set counted as shards."""
    invocations = [{"argv": ["sapo_lab", "replicate", *first]}, {"argv": ["sapo_lab", "replicate", *second]}]
    assert decision._shard_count(invocations) == count
