"""Every seed a run derives (sapo_lab.training.seeds): the committed formulas, and which streams follow the run seed.

Each test names the mistake it catches."""

import pytest
import torch
from _micro import QUIET, micro

import sapo_lab.training.cold_start as cold_start_mod
import sapo_lab.training.evaluation as evaluation_mod
from sapo_lab.training import seeds


@pytest.mark.parametrize("seed", [0, 1, 7, 123])
def test_the_formulas_are_the_ones_committed_results_used(seed):
    """Catches: any edit of a derivation, which would silently change every committed study's numbers
    (the prefix test would only notice on a machine whose kernels reproduce the committed runs)."""
    assert seeds.model_init_seed(seed) == seed
    assert seeds.cold_start_batch_seed(seed) == seed + 1_000_003
    assert seeds.cold_start_dev_eval_seed(40) == 40
    assert seeds.held_out_eval_seed(seed) == seed * 7919
    assert seeds.final_eval_seed(seed) == seed * 7919 + 1
    assert seeds.dev_eval_seed(seed, 6) == seed * 1_000_003 + 6
    assert (seeds.data_seed(seed), seeds.shuffle_seed(seed), seeds.sample_seed(seed)) == (
        seed * 3 + 11, seed * 3 + 12, seed * 3 + 13)
    assert seeds.global_seed(seed) == seed
    assert seeds.sample_command_seed(seed) == seed  # what the sample command used before it had a name
    gens = seeds.run_generators(seed, torch.device("cpu"))
    assert list(gens) == ["data", "shuffle", "sample"]  # the order checkpoints store them in
    assert [g.initial_seed() for g in gens.values()] == [seed * 3 + 11, seed * 3 + 12, seed * 3 + 13]


def _streams(tmp_path, seed, monkeypatch):
    """The seed of every random stream a 2-step micro run uses, by stream."""
    from sapo_lab.training.trainer import Trainer

    used: dict[str, list] = {}
    real_eval, real_load, real_batch = evaluation_mod.evaluate, cold_start_mod.load_model_and_tokenizer, cold_start_mod.sft_batch

    def evaluate(*args, seed, **kwargs):
        used.setdefault(f"evaluate n={kwargs['num_samples']} greedy={kwargs.get('greedy', True)}", []).append(seed)
        return real_eval(*args, seed=seed, **kwargs)

    def cold_start_evaluate(*args, seed, **kwargs):
        used.setdefault("cold start dev check", []).append(seed)
        return real_eval(*args, seed=seed, **kwargs)

    def load(name, seed=None, **kwargs):
        used.setdefault("model init", []).append(seed)
        return real_load(name, seed=seed, **kwargs)

    def sft_batch(tok, problems, device):
        used.setdefault("cold start batches", []).append(tuple(p.prompt for p in problems))
        return real_batch(tok, problems, device)

    monkeypatch.setattr(evaluation_mod, "evaluate", evaluate)
    monkeypatch.setattr(cold_start_mod, "evaluate", cold_start_evaluate)
    monkeypatch.setattr(cold_start_mod, "load_model_and_tokenizer", load)
    monkeypatch.setattr(cold_start_mod, "sft_batch", sft_batch)
    t = Trainer(micro(seed=seed, max_steps=2), str(tmp_path / f"seed{seed}"), **QUIET)
    t.train()
    used.update({name: [g.initial_seed()] for name, g in t.generators.items()})
    used["torch global"] = [torch.initial_seed()]
    monkeypatch.undo()
    return used


def test_every_random_stream_follows_the_run_seed(tmp_path, monkeypatch):
    """Catches: a stream seeded with a constant (two seeds of a study would share its randomness and look
    more alike than they are) or a stream that disappears from the list. The one documented exception:
    the cold start's dev checks are seeded by the update number."""
    a, b = _streams(tmp_path, 3, monkeypatch), _streams(tmp_path, 4, monkeypatch)
    assert set(a) == set(b) == {
        "model init", "cold start batches", "cold start dev check", "evaluate n=2 greedy=True",
        "evaluate n=1 greedy=False", "data", "shuffle", "sample", "torch global"}
    for stream in a:
        if stream == "cold start dev check":
            assert a[stream] == b[stream] == [2, 4]  # update numbers (eval_every 2, max_updates 4)
        else:
            assert a[stream] != b[stream], stream
    assert a["evaluate n=2 greedy=True"] == [3 * 7919, 3 * 7919 + 1]  # cold start, then final model
    assert a["evaluate n=1 greedy=False"] == [3 * 1_000_003 + 2]  # dev at step 2
