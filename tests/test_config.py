import json

import pytest

from sapo_lab.training.config import PRESETS, TrainConfig, config_from_dict, leaf_keys, load_config, resolve_key


def test_presets_load_and_default_is_cpu_tiny():
    for name in PRESETS:
        load_config(name)
    cfg = load_config()
    assert cfg.model.name_or_path == "cpu-tiny" and cfg.loss.loss_type == "sapo"
    assert cfg.optimization.steps_per_generation == 4 and cfg.device == "auto"
    assert load_config("gpu-gpt2-small").model.name_or_path == "gpu-gpt2-small"


def test_trl_names_and_overrides():
    cfg = load_config(
        "cpu-tiny",
        {
            "loss_type": "gspo",
            "num_generations": "6",
            "max_completion_length": 7,
            "beta": "0.01",
            "epsilon_high": "0.28",
            "importance_sampling_level": "null",
            "optimization.learning_rate": "1e-3",
            "pass_k": "1,2",
        },
    )
    assert cfg.loss.loss_type == "gspo" and cfg.rollout.num_generations == 6
    assert cfg.loss.epsilon_high == 0.28 and cfg.loss.importance_sampling_level is None
    assert cfg.optimization.learning_rate == 1e-3 and cfg.evaluation.pass_k == (1, 2)
    assert resolve_key("sapo-temperature-neg") == "loss.sapo_temperature_neg"


def test_leaf_names_are_unique():
    leaves = [k.rsplit(".", 1)[-1] for k in leaf_keys()]
    assert len(leaves) == len(set(leaves))


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"no_such_key": 1}, "unknown config key 'no_such_key'"),
        ({"loss.no_such": 1}, "unknown config key 'loss.no_such'"),
        ({"loss_type": "ppo"}, "loss.loss_type"),
        ({"num_generations": 1}, "rollout.num_generations"),
        ({"max_steps": "ten"}, "optimization.max_steps"),
        ({"temperature": 0}, "rollout.temperature"),
        ({"steps_per_generation": 10_000}, "steps_per_generation"),
        ({"pass_k": "1,9"}, "pass_k"),
        ({"device": "tpu"}, "device"),
        ({"greedy": "maybe"}, "greedy"),
        ({"loss_type": "gspo", "importance_sampling_level": "token"}, "importance_sampling_level"),
        ({"lr_scheduler_type": "step"}, "lr_scheduler_type"),
    ],
)
def test_bad_values_are_refused_by_name(overrides, match):
    with pytest.raises(ValueError, match=match):
        load_config("cpu-tiny", overrides)


def test_json_roundtrip_and_file_errors(tmp_path):
    cfg = load_config("cpu-tiny", {"seed": 5, "loss_type": "grpo"})
    path = tmp_path / "c.json"
    cfg.save(str(path))
    assert load_config(str(path)) == cfg
    assert config_from_dict(json.loads(path.read_text())) == cfg
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rollout": {"num_generation": 4}}))
    with pytest.raises(ValueError, match="rollout.num_generation"):
        load_config(str(bad))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_config(str(tmp_path / "broken.json"))
    with pytest.raises(ValueError, match="unknown preset"):
        load_config("gpu-huge")
    with pytest.raises(ValueError, match="mapping"):
        config_from_dict({"loss": 3})
    assert isinstance(cfg, TrainConfig)
