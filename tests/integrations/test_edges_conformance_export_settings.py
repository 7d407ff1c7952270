"""Exported settings with non-default, distinct values and their documented bounds, without TRL or verl installed.

Distinct values throughout: AdamW betas 0.8 and 0.97, temperatures 1.5 and 0.5, 64 prompts a rollout, seed 0 and
max_steps 0 (the values a truthiness test drops). Expected values are typed literals with their derivation.
"""

import importlib.util
import math

import pytest
import torch

from sapo_lab.integrations import trl as trl_mapping
from sapo_lab.integrations import trl_export
from sapo_lab.integrations import verl as verl_mapping
from sapo_lab.integrations.trl_diagnostics import NAMES, gate_statistics
from sapo_lab.integrations.verl_export import hydra_value
from sapo_lab.runs.config import load_config

ACTOR = "actor_rollout_ref.actor"


@pytest.mark.parametrize(("value", "written"), [
    ("null", "'null'"), ("true", "'true'"), ("false", "'false'"), ("nullish", "nullish"), (None, "null"),
])
def test_hydra_words_stay_text(value, written):
    """Catches 'null' written bare (Hydra reads None, a missing model path) beside 'true' and 'false' (a bool)."""
    assert hydra_value(value) == written


def _gpu_config(**settings):
    return load_config("gpu-gpt2-small", settings)


def test_verl_receives_each_beta_and_temperature_in_its_own_place():
    """Catches AdamW's betas written in the wrong order and tau_neg taken from tau_pos: each value is distinct."""
    got = verl_mapping.overrides(_gpu_config(**{
        "optimization.adam_beta1": 0.8, "optimization.adam_beta2": 0.97,
        "loss.sapo_temperature_pos": 1.5, "loss.sapo_temperature_neg": 0.5}))
    assert got[f"{ACTOR}.optim.betas"] == [0.8, 0.97]
    assert (got[f"{ACTOR}.tau_pos"], got[f"{ACTOR}.tau_neg"]) == (1.5, 0.5)


@pytest.mark.parametrize(("beta", "on"), [(0.0, False), (0.001, True)])
def test_verl_kl_loss_only_for_a_positive_beta(beta, on):
    """Catches the KL loss switched on at beta = 0 (beta > 0 in the mapping's note): 0 must mean no reference model."""
    got = verl_mapping.overrides(_gpu_config(**{"optimization.beta": beta}))
    assert (got[f"{ACTOR}.use_kl_loss"], got[f"{ACTOR}.kl_loss_coef"]) == (on, beta)


def test_verl_accepts_a_training_split_of_exactly_one_rollout():
    """Catches 'one rollout needs prompts_per_rollout prompts' made strict: 64 training prompts and 64 prompts a
    rollout make 1 rollout an epoch, so 37 rollout steps need 37 epochs; 63 prompts cannot fill one rollout."""
    settings = {"rollout.prompts_per_rollout": 64, "optimization.max_steps": 37}
    assert verl_mapping.total_epochs(_gpu_config(**settings, **{"task.num_train": 64})) == 37
    with pytest.raises(ValueError, match="task.num_train' = 63"):
        verl_mapping.total_epochs(_gpu_config(**settings, **{"task.num_train": 63}))


@pytest.mark.parametrize("prefix", ["", "+", "~", "++"])
def test_a_misplaced_temperature_is_refused_however_it_is_spelled(prefix):
    """Catches Hydra's deletion prefix '~' (or '++') not stripped before the key is looked up."""
    with pytest.raises(ValueError, match="is refused"):
        verl_mapping.check_extra_overrides([f"{prefix}{ACTOR}.policy_loss.tau_pos=2.0"])
    verl_mapping.check_extra_overrides([f"{prefix}trainer.note=x"])  # any other key passes


@pytest.mark.parametrize(("kwargs", "refused"), [
    ({"top_p": 1.0}, False),
    ({"top_p": 0.999}, True),
    ({"top_k": 0}, False),
    ({"top_k": 1}, True),
    # generation_kwargs win over the top-level field, as in TRL: each way round
    ({"top_p": 0.9, "generation_kwargs": {"top_p": 1.0}}, False),
    ({"top_p": 1.0, "generation_kwargs": {"top_p": 0.9}}, True),
])
def test_truncated_sampling_with_vllm_correction_at_its_bounds(kwargs, refused):
    """Catches top_p = 1 (untruncated) refused, top_k = 0 (off) refused, and the top-level field winning over
    generation_kwargs."""
    full = {"use_vllm": True, **kwargs}
    if refused:
        with pytest.raises(ValueError, match="cannot be exported to TRL with use_vllm=True"):
            trl_mapping.check_sampling(full)
    else:
        trl_mapping.check_sampling(full)


def test_verifier_shares_are_per_completion():
    """Catches a reason's share divided by the number of reasons: 2 correct and 1 wrong of 3 completions give
    2/3 and 1/3 (dividing by the 2 reasons would give 1 and 1/2). Completion ids end in EOS (1) for all three."""
    from sapo_lab.tasks import make_problem

    problem = make_problem(47, 85, 2)
    rows = [trl_mapping.problem_to_row(problem)] * 3
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    logged = {}
    reward = trl_mapping.reward_function(eos_token_ids=[1])
    out = reward(prompts=[problem.prompt] * 3, completions=[problem.answer, problem.answer, "999"],
                 completion_ids=[[1, 5, 1], [5, 1], [1, 1]], log_metric=logged.__setitem__, **columns)
    assert out == [1.0, 1.0, 0.0]
    assert logged == pytest.approx({"verifier/correct": 2 / 3, "verifier/wrong": 1 / 3})


def _exported_script(tmp_path):
    out = tmp_path / "trl-run"
    trl_export.export(load_config("cpu-tiny", {"seed": 5, "optimization.max_steps": 9}), str(out), source="cpu-tiny")
    spec = importlib.util.spec_from_file_location("train_trl_under_test", out / "train_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_trl_passes_zero_steps_and_seed_zero(tmp_path, monkeypatch):
    """Catches ``if args.max_steps:`` and ``if args.seed:``: 0 is a value the user gave (the config says 9 steps and
    seed 5), not an absent flag; an absent flag keeps the config's."""
    script = _exported_script(tmp_path)
    seen = []

    def fake_run_trl(cfg, model, output_dir, *, prompt_format):
        seen.append((cfg.optimization.max_steps, cfg.seed))
        return {"status": "completed", "optimizer_steps": 0, "train_wall_s": 0.0}

    monkeypatch.setattr(trl_export, "run_trl", fake_run_trl)
    assert script.main(["--max-steps", "0", "--seed", "0", "--output-dir", str(tmp_path / "o")]) == 0
    assert script.main(["--output-dir", str(tmp_path / "p")]) == 0
    assert seen == [(0, 0), (9, 5)]


def test_signal_removed_with_an_empty_cell_is_a_number():
    """Catches a cell without signal added to the sum (its removed share is NaN): every token here has A > 0 and
    r > 1, so three of the four sign x side cells are empty. Two responses of one token each (weight 1/2), A = 1 and
    2, log r = 0.5 and 1, tau_pos = 2: removed = sum |A| r (1 - w) / sum |A| r with w = sech^2(tau (r - 1) / 2)."""
    z = torch.tensor([[0.5], [1.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, 2.0], dtype=torch.float64)
    stats = gate_statistics(z, torch.zeros_like(z), adv, torch.ones(2, 1), tau_pos=2.0, tau_neg=0.5)
    signal = removed = 0.0
    for a, lr in ((1.0, 0.5), (2.0, 1.0)):
        r = math.exp(lr)
        w = 1.0 / math.cosh(2.0 * (r - 1.0) / 2.0) ** 2
        signal += a * r / 2
        removed += a * r * (1.0 - w) / 2
    assert stats[NAMES["signal_removed"]] == pytest.approx(removed / signal, rel=1e-12)
