import json

import pytest

from sapo_lab.runs.config import (
    PRESETS,
    TrainConfig,
    config_from_dict,
    leaf_keys,
    load_config,
    resolve_key,
    validate,
)
from sapo_lab.studies.spec import load_declaration


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


# (key, a value its rule refuses, the value at the boundary that it accepts, the rule's words)
RULES = [
    ("task.num_train", 0, 1, ">= 1"),
    ("task.num_dev", 0, 1, ">= 1"),
    ("task.num_eval", 0, 1, ">= 1"),
    ("cold_start.max_updates", -1, 0, ">= 0"),
    ("cold_start.batch_size", 0, 1, ">= 1"),
    ("cold_start.sft_learning_rate", 0, 1e-9, "> 0"),
    ("cold_start.target_pass1", 1.5, 1, "<= 1"),
    ("cold_start.target_pass1", -0.1, 0, ">= 0"),
    ("cold_start.eval_every", 0, 1, ">= 1"),
    ("rollout.prompts_per_rollout", 0, 1, ">= 1"),
    ("rollout.num_generations", 1, 2, ">= 2"),
    ("rollout.max_completion_length", 0, 1, ">= 1"),
    ("rollout.temperature", 0, 1e-9, "> 0"),
    ("optimization.max_steps", -1, 0, ">= 0"),
    ("optimization.steps_per_generation", 0, 1, "in [1, responses per rollout = 256]"),
    ("optimization.steps_per_generation", 257, 256, "in [1, responses per rollout = 256]"),
    ("optimization.learning_rate", 0, 1e-9, "> 0"),
    ("optimization.learning_rate", "nan", 1e9, "must be a finite number"),
    ("optimization.learning_rate", "inf", 1e9, "must be a finite number"),
    ("loss.sapo_temperature_pos", "inf", 1e9, "must be a finite number"),
    ("seed", -1, 0, ">= 0"),
    ("seed", 2**32, 2**32 - 1, "< 4.29497e+09"),
    ("optimization.lr_scheduler_type", "step", "cosine", "one of ('constant', 'constant_with_warmup', 'linear', 'cosine')"),
    ("optimization.warmup_steps", -1, 0, ">= 0"),
    ("optimization.weight_decay", -1e-9, 0, ">= 0"),
    ("optimization.adam_beta1", 1, 0, "< 1"),
    ("optimization.adam_beta2", -0.1, 0.999, ">= 0"),
    ("optimization.max_grad_norm", -1, 0, ">= 0"),
    ("optimization.beta", -1, 0, ">= 0"),
    ("loss.loss_type", "ppo", "gauss", "one of ('sapo', 'grpo', 'gspo', 'sapo_directional', 'gauss')"),
    ("loss.sapo_temperature_pos", 0, 1e-9, "> 0"),
    ("loss.sapo_temperature_neg", -1, 1e-9, "> 0"),
    ("loss.epsilon", 0, 0.5, "> 0"),
    ("loss.epsilon", 1, 0.999, "< 1"),
    ("loss.epsilon_high", 0, 1e-9, "> 0"),
    ("loss.importance_sampling_level", "tokens", "sequence", "one of ('token', 'sequence')"),
    ("loss.aggregation", "mean", "token_pool", "one of ('per_response', 'token_pool')"),
    ("loss.max_log_ratio", 0, 1e-9, "> 0"),
    ("loss.max_log_ratio_policy", "clip", "skip", "one of ('record', 'skip', 'error')"),
    ("evaluation.dev_every", 0, 1, ">= 1"),
    ("evaluation.dev_prompts", 0, 1, ">= 1"),
    ("evaluation.num_samples", 0, 4, ">= 1"),
    ("evaluation.pass_k", "1,5", "1,4", "each k must be in [1, num_samples=4]"),
    ("evaluation.pass_k", "0", "1", "each k must be in [1, num_samples=4]"),
    ("evaluation.pass_k", "", "4", "each k must be in [1, num_samples=4]"),
    ("evaluation.eval_temperature", -1, 0, ">= 0"),
    ("evaluation.gradient_comparison_every", -1, 0, ">= 0"),
    ("device", "tpu", "cuda:1", "must be 'auto', 'cpu' or 'cuda[:N]'"),
    ("save_steps", 0, 1, ">= 1"),
    ("max_train_time_s", -1, 0, ">= 0"),
    ("threads", -1, 0, ">= 0"),
]


@pytest.mark.parametrize("key,bad,good,rule", RULES, ids=[f"{r[0]}={r[1]!r}" for r in RULES])
def test_each_rule_refuses_in_one_line_naming_the_key_and_accepts_its_boundary(key, bad, good, rule):
    # catches a bound lost in the move to pydantic or moved by one (gt for ge), a message that does not
    # name the key, and pydantic's multi-line report reaching the user
    with pytest.raises(ValueError) as refused:
        load_config("cpu-tiny", {key: bad})
    message = str(refused.value)
    assert message.startswith(f"config key {key!r} = ") and rule in message and "\n" not in message, message
    typed = {"inf": float("inf"), "1,4": (1, 4), "1": (1,), "4": (4,)}  # text that is read as another type
    assert _value(load_config("cpu-tiny", {key: good}), key) == typed.get(good, good)


def test_a_level_the_kernel_lacks_is_refused_naming_the_level_key():
    # catches the relation between loss_type and importance_sampling_level lost (gspo is sequence-level only)
    with pytest.raises(ValueError, match=r"^config key 'loss.importance_sampling_level' = 'token' is invalid: loss_type='gspo'"):
        load_config("cpu-tiny", {"loss_type": "gspo", "importance_sampling_level": "token"})
    assert load_config("cpu-tiny", {"loss_type": "gspo", "importance_sampling_level": "sequence"}).loss.loss_type == "gspo"


def _value(config, dotted: str):
    for part in dotted.split("."):
        config = getattr(config, part)
    return config


def test_command_line_text_is_read_as_the_keys_type():
    # catches text kept as text (a learning rate of "1e-3"), an int written for a float key (config.json
    # would say 12 where the same run's committed file says 12.0), and "none" not read as None
    cfg = load_config(
        "cpu-tiny",
        {"learning_rate": "1e-3", "max_steps": "7", "max_train_time_s": "12", "greedy": "false",
         "skip_zero_advantage": "no", "epsilon_high": "none", "eval_temperature": "NULL", "pass_k": "1 2",
         "task.options": '{"max_digits": 3}'},
    )
    o, e = cfg.optimization, cfg.evaluation
    assert (o.learning_rate, type(o.learning_rate)) == (0.001, float) and (o.max_steps, type(o.max_steps)) == (7, int)
    assert (cfg.max_train_time_s, type(cfg.max_train_time_s)) == (12.0, float)
    assert e.greedy is False and o.skip_zero_advantage is False
    assert cfg.loss.epsilon_high is None and e.eval_temperature is None
    assert e.pass_k == (1, 2) and type(e.pass_k) is tuple and cfg.task.options == {"max_digits": 3}
    for text, expected in [("true", True), ("TRUE", True), ("yes", True), ("1", True), ("False", False), ("0", False)]:
        assert load_config("cpu-tiny", {"greedy": text}).evaluation.greedy is expected, text
    assert load_config("cpu-tiny", {"importance_sampling_level": "None"}).loss.importance_sampling_level is None
    assert load_config("cpu-tiny", {"pass_k": "1,4"}).evaluation.pass_k == (1, 4)


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"max_steps": True}, "config key 'optimization.max_steps' must be an integer, got True"),
        ({"learning_rate": True}, "config key 'optimization.learning_rate' must be a number, got True"),
        ({"max_steps": "none"}, "config key 'optimization.max_steps' must be an integer, got 'none'"),
        ({"max_steps": None}, "config key 'optimization.max_steps' cannot be null"),
        ({"max_steps": 3.5}, "config key 'optimization.max_steps' must be an integer, got 3.5"),
        ({"learning_rate": "fast"}, "config key 'optimization.learning_rate' must be a number, got 'fast'"),
        ({"greedy": "maybe"}, "config key 'evaluation.greedy' must be true or false, got 'maybe'"),
        ({"device": 3}, "config key 'device' must be a string, got 3"),
        ({"pass_k": "1,a"}, "config key 'evaluation.pass_k' must be an integer, got 'a'"),
        ({"task.options": "x"}, "config key 'task.options' must be a JSON object, got 'x'"),
        ({"task.options": "[1]"}, "config key 'task.options' must be a mapping, got [1]"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_not_converted(overrides, message):
    # catches pydantic's lax mode reading True as 1, or the text "none" as None for a key that cannot be None
    with pytest.raises(ValueError) as refused:
        load_config("cpu-tiny", overrides)
    assert str(refused.value) == message


def test_an_unknown_key_in_a_file_is_named_with_the_keys_of_its_section(tmp_path):
    # catches a misspelt key silently ignored (the run would use the default), and an error that does not
    # say which key or what the section accepts
    with pytest.raises(ValueError) as refused:
        config_from_dict({"rollout": {"num_generation": 4}})
    assert str(refused.value) == (
        "unknown config key 'rollout.num_generation'; known keys here: "
        "['max_completion_length', 'num_generations', 'prompts_per_rollout', 'temperature']"
    )
    with pytest.raises(ValueError, match=r"^unknown config key 'sed'; known keys here: \[.*'seed'"):
        config_from_dict({"sed": 1})
    with pytest.raises(ValueError, match=r"^config section 'evaluation' must be a mapping, got None$"):
        config_from_dict({"evaluation": None})


def test_validate_rechecks_a_config_changed_by_assignment():
    # catches a validate() that checks only the relations between keys, not each key's own rule
    cfg = load_config("cpu-tiny")
    cfg.optimization.max_steps = 5  # assignment keeps the value; a run's config is checked where it is loaded
    validate(cfg)
    assert cfg.optimization.max_steps == 5
    cfg.rollout.temperature = 0.0
    with pytest.raises(ValueError, match="^config key 'rollout.temperature' = 0.0 is invalid: must be > 0$"):
        validate(cfg)


@pytest.mark.parametrize("reader,what", [(load_config, "config file"), (load_declaration, "study file")])
def test_both_json_readers_refuse_a_bad_file_in_one_line(tmp_path, reader, what):
    # catches one of the two readers keeping its own checks (a traceback for an unreadable file, a list
    # accepted as a config)
    cases = {"missing.json": None, "broken.json": b"{", "list.json": b"[1]", "binary.json": b"\xff\xfe"}
    expected = {
        "missing.json": "does not exist",
        "broken.json": "is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "list.json": "must hold a JSON object",
        "binary.json": "is not UTF-8 text",
    }
    for name, content in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(ValueError) as refused:
            reader(str(path))
        message = str(refused.value)
        assert message.startswith(f"{what} {str(path)!r} {expected[name]}") and "\n" not in message, message
