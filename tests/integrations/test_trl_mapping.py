"""The declared sapo_lab -> TRL mapping, checked without TRL (runs in the main environment)."""

import dataclasses

import pytest
from _micro import micro

from sapo_lab import LOSS_TYPES
from sapo_lab.integrations import trl as m
from sapo_lab.objective.registry import KERNELS
from sapo_lab.runs.config import leaf_keys


def test_every_config_key_has_exactly_one_row():
    keys = [row.key for row in m.MAPPING]
    assert sorted(keys) == sorted(leaf_keys())  # a new config field must be mapped, dropped or scripted
    assert len(keys) == len(set(keys))
    for row in m.MAPPING:
        assert row.how in ("mapped", "script", "dropped")
        assert (row.convert is not None) == (row.how == "mapped"), row.key
        assert row.note


def test_import_sapo_lab_never_imports_trl():
    import subprocess
    import sys

    code = (
        "import sys, sapo_lab, sapo_lab.cli, sapo_lab.integrations.trl\n"
        "sys.exit(int('trl' in sys.modules or 'datasets' in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize(
    ("loss_type", "aggregation", "level", "expected"),
    [("sapo", "per_response", None, ("sapo", "token")), ("sapo", "per_response", "sequence", ("sapo", "sequence")),
     ("grpo", "per_response", None, ("grpo", "token")), ("gspo", "per_response", None, ("grpo", "sequence")),
     ("grpo", "token_pool", None, ("bnpo", "token"))],
)
def test_loss_type_and_level(loss_type, aggregation, level, expected):
    cfg = micro(**{"loss.loss_type": loss_type, "loss.aggregation": aggregation, "loss.importance_sampling_level": level})
    kw = m.grpo_config_kwargs(cfg)
    assert (kw["loss_type"], kw["importance_sampling_level"]) == expected


@pytest.mark.parametrize("name", LOSS_TYPES)
def test_every_kernel_is_exported_under_its_trl_name_or_refused_by_key(name):
    """Mistake caught: exporting a kernel TRL does not have (sapo_directional, gauss) under its own name,
    which writes a train_trl.py that fails at start or trains another loss; or a mapping note that
    forgets a kernel."""
    cfg = micro(**{"loss.loss_type": name})
    trl_name = KERNELS[name].trl_loss_type
    if trl_name is None:
        with pytest.raises(ValueError, match=r"config key 'loss\.loss_type' = '" + name):
            m.grpo_config_kwargs(cfg)
    else:
        assert m.grpo_config_kwargs(cfg)["loss_type"] == trl_name
    note = next(row.note for row in m.MAPPING if row.key == "loss.loss_type")
    assert name in note


def test_k_becomes_steps_per_generation_with_optimizer_step_units():
    cfg = micro(**{"optimization.steps_per_generation": 2, "optimization.max_steps": 3, "save_steps": 2})
    kw = m.grpo_config_kwargs(cfg, num_processes=2)
    # 4 prompts x G=4 = 16 responses per rollout, 2 optimizer steps of 8, 4 per process
    assert kw["per_device_train_batch_size"] == 4 and kw["steps_per_generation"] == 2
    assert kw["max_steps"] == 6 and kw["save_steps"] == 4
    assert kw["num_iterations"] == 1 and kw["gradient_accumulation_steps"] == 1
    with pytest.raises(ValueError, match="split evenly"):
        m.grpo_config_kwargs(cfg, num_processes=3)


@pytest.mark.parametrize(
    ("override", "key"),
    [({"loss.aggregation": "token_pool"}, "loss.aggregation"),
     ({"loss.max_log_ratio_policy": "skip"}, "loss.max_log_ratio_policy")],
)
def test_refused_values_name_the_key(override, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        m.grpo_config_kwargs(micro(**override))


def test_reward_function_uses_the_verifier_and_counts_reasons():
    from sapo_lab.tasks import make_problem

    p = make_problem(47, 85, 2)
    rows = [m.problem_to_row(p)] * 3
    cols = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    logged = {}
    reward = m.reward_function(eos_token_ids=[1])
    out = reward(prompts=[p.prompt] * 3, completions=[p.answer, "999", p.answer], completion_ids=[[5, 1], [5, 1], [5, 5]],
                 log_metric=lambda k, v: logged.__setitem__(k, v), **cols)
    assert out == [1.0, 0.0, 0.0]  # the third has no EOS: truncated, even with the right digits
    assert dict(reward.reasons) == {"correct": 1, "wrong": 1, "truncated": 1}
    assert logged == pytest.approx({"verifier/correct": 1 / 3, "verifier/wrong": 1 / 3, "verifier/truncated": 1 / 3})


def test_chat_rows_hold_messages():
    from sapo_lab.tasks import make_problem

    row = m.problem_to_row(make_problem(1, 2, 1), "chat")
    assert row["prompt"] == [{"role": "user", "content": "1+2="}]
    assert {f"problem_{f.name}" for f in dataclasses.fields(type(make_problem(1, 2, 1)))} <= set(row)


def test_export_trl_cli(tmp_path, capsys):
    from sapo_lab.cli import main

    out = tmp_path / "exp"
    assert main(["export-trl", "--config", "cpu-tiny", "--output-dir", str(out), "--prompt-format", "plain"]) == 0
    assert (out / "train_trl.py").is_file() and (out / "accelerate_config.yaml").is_file()
    compile((out / "train_trl.py").read_text(), "train_trl.py", "exec")
    assert main(["export-trl", "--config", "cpu-tiny", "--output-dir", str(out)]) == 2  # never overwrites
    assert main(["export-trl", "--output-dir", str(tmp_path / "b"), "--loss.max_log_ratio_policy", "skip"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: config key 'loss.max_log_ratio_policy'")


@pytest.mark.parametrize("sampling", [{"top_p": 0.9}, {"top_k": 50}, {"min_p": 0.05},
                                      {"generation_kwargs": {"top_p": 0.95}}])
def test_truncated_sampling_with_vllm_importance_sampling_is_refused_in_one_line(sampling):
    """Mistake caught: a GRPOConfig built with vLLM's importance-sampling correction (TRL's default with use_vllm)
    and top-p/top-k/min-p truncation, whose per-token weight then carries the mass the truncation kept (TRL issue
    #6789). Refused before TRL is imported, so this runs without TRL."""
    with pytest.raises(ValueError) as err:
        m.to_grpo_config(micro(), use_vllm=True, **sampling)
    message = str(err.value)
    setting = next(iter(sampling.get("generation_kwargs", sampling)))
    assert "\n" not in message and message.startswith(f"{setting}=") and "#6789" in message, message
    assert "vllm_importance_sampling_correction=False" in message  # the way out is named


@pytest.mark.parametrize("kwargs", [
    {"use_vllm": True},  # untruncated: FIXED's top_p=1, top_k=0
    {"use_vllm": True, "top_p": 0.9, "vllm_importance_sampling_correction": False},
    {"use_vllm": False, "top_p": 0.9, "top_k": 50},  # no vLLM: no importance-sampling weight at all
    {"use_vllm": True, "generation_kwargs": {"top_p": 1.0}, "top_k": 0},
])
def test_untruncated_or_uncorrected_sampling_is_accepted(kwargs):
    """Mistake caught: a guard that refuses every vLLM run, or any top-p, instead of the one biased combination."""
    m.check_sampling({**m.grpo_config_kwargs(micro()), **kwargs})


def test_generation_kwargs_win_over_the_field_as_in_trl():
    """TRL passes generation_kwargs after its own fields: a top_p=1.0 there undoes a top_p field, and the reverse
    is refused (catches a guard that reads only the field)."""
    base = {**m.grpo_config_kwargs(micro()), "use_vllm": True}
    m.check_sampling({**base, "top_p": 0.5, "generation_kwargs": {"top_p": 1.0}})
    with pytest.raises(ValueError, match=r"^top_p=0\.8 "):
        m.check_sampling({**base, "generation_kwargs": {"top_p": 0.8}})
