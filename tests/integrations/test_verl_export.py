"""``export-verl`` and the declared sapo_lab -> verl mapping, checked without verl (the main environment).

tests/integrations/test_verl_config.py composes the exported overrides with verl's own config in verl's environment.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from _verl_job import as_dict, commented_lines, script_overrides

from sapo_lab.cli import main
from sapo_lab.integrations import verl as m
from sapo_lab.runs.config import leaf_keys, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
A = "actor_rollout_ref.actor"
HF_NAME = "Qwen/Qwen2.5-0.5B"


def _export(tmp_path_factory, name, *argv):
    out = str(tmp_path_factory.mktemp("verl") / name)
    assert main(["export-verl", *argv, "--output-dir", out]) == 0
    return out


@pytest.fixture(scope="module")
def size_name_job(tmp_path_factory):
    """What a user types for the GPU preset: its model is sapo_lab's own gpu-gpt2-small."""
    return _export(tmp_path_factory, "gpt2", "--config", "gpu-gpt2-small")


@pytest.fixture(scope="module")
def hf_job(tmp_path_factory):
    """A hub model with settings that differ from verl's defaults, so a key left at its default shows."""
    return _export(tmp_path_factory, "hf", "--config", "gpu-gpt2-small", "--model", HF_NAME,
                   "--sapo_temperature_pos", "1.3", "--sapo_temperature_neg", "1.7", "--beta", "0.02",
                   "--learning_rate", "3e-5", "--steps_per_generation", "8", "--lr_scheduler_type", "cosine")


def _job(path):
    return as_dict(script_overrides(os.path.join(path, "run_verl.sh")))


def _rows(path, split):
    with open(os.path.join(path, "data", f"{split}.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_every_config_key_has_exactly_one_row():
    # catches a config key added to the tree without a decision for verl (mapped, script or dropped)
    keys = [row.key for row in m.MAPPING]
    assert sorted(keys) == sorted(leaf_keys())
    assert len(keys) == len(set(keys))
    for row in m.MAPPING:
        assert row.how in ("mapped", "script", "dropped")
        assert (row.convert is not None) == (row.how == "mapped"), row.key
        assert row.note


def test_import_never_loads_verl_or_hydra():
    # catches a module-level `import verl` (the main environment has neither)
    code = ("import sys, sapo_lab.cli, sapo_lab.integrations.verl, sapo_lab.integrations.verl_export\n"
            "sys.exit(int('verl' in sys.modules or 'hydra' in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_size_name_job_holds_the_presets_settings(size_name_job):
    # catches a mapped key that never reaches the command, M in responses instead of prompts, a lost
    # cold-start step; the expected values are the preset's, with the arithmetic of verl's definitions
    cfg = load_config("gpu-gpt2-small")
    job = _job(size_name_job)
    p, g, k = cfg.rollout.prompts_per_rollout, cfg.rollout.num_generations, cfg.optimization.steps_per_generation
    assert job["data.train_batch_size"] == str(p) and job[f"{A}.ppo_mini_batch_size"] == str(p // k)
    assert int(job["data.train_batch_size"]) // int(job[f"{A}.ppo_mini_batch_size"]) * int(job[f"{A}.ppo_epochs"]) == k
    assert job["actor_rollout_ref.rollout.n"] == str(g)
    assert job[f"{A}.policy_loss.loss_mode"] == "sapo" and job[f"{A}.loss_agg_mode"] == "seq-mean-token-mean"
    assert float(job[f"{A}.tau_pos"]) == cfg.loss.sapo_temperature_pos
    assert float(job[f"{A}.tau_neg"]) == cfg.loss.sapo_temperature_neg
    assert float(job[f"{A}.optim.lr"]) == cfg.optimization.learning_rate
    assert job[f"{A}.use_kl_loss"] == "false"
    assert job["data.max_response_length"] == str(cfg.rollout.max_completion_length)
    assert job["trainer.total_training_steps"] == str(cfg.optimization.max_steps)
    # warmup: 20 optimizer steps of the preset at M = 4 are 5 rollout steps
    assert job[f"{A}.optim.lr_warmup_steps"] == str(-(-cfg.optimization.warmup_steps // k))
    here = os.path.realpath(size_name_job)
    assert job["actor_rollout_ref.model.path"] == f"{here}/coldstart/cold_start"
    assert job["data.train_files"] == f"{here}/data/train.jsonl"
    script = open(os.path.join(size_name_job, "run_verl.sh")).read()
    assert "python3 -m sapo_lab train --config \"$HERE/config.json\" --optimization.max_steps 0" in script
    assert not any(key.startswith(f"+{A}.policy_loss.tau") or ".policy_loss.tau" in key for key in job)
    assert load_config(os.path.join(size_name_job, "config.json")) == cfg


def test_hf_job_takes_the_settings_the_user_changed(hf_job):
    # catches a key that keeps verl's default (tau 1.0 / 1.05, lr 1e-6, KL off, mini-batch 256), and a hub
    # name turned into a path or sent through the cold start
    job = _job(hf_job)
    assert (job[f"{A}.tau_pos"], job[f"{A}.tau_neg"]) == ("1.3", "1.7")
    assert (job[f"{A}.use_kl_loss"], job[f"{A}.kl_loss_coef"], job[f"{A}.kl_loss_type"]) == ("true", "0.02", "low_var_kl")
    assert float(job[f"{A}.optim.lr"]) == 3e-5 and job[f"{A}.optim.lr_scheduler_type"] == "cosine"
    assert job[f"{A}.ppo_mini_batch_size"] == "8"  # 64 prompts / M = 8
    assert job[f"{A}.optim.lr_warmup_steps"] == "3"  # 20 optimizer steps / M = 8, rounded up
    assert job["actor_rollout_ref.model.path"] == HF_NAME
    assert "sapo_lab train" not in open(os.path.join(hf_job, "run_verl.sh")).read()


def test_each_override_line_names_the_book_key_or_why_it_is_fixed(size_name_job):
    # catches an override written without its comment, or commented with a key the config does not have
    keys = set(leaf_keys())
    lines = commented_lines(os.path.join(size_name_job, "run_verl.sh"))
    assert len(lines) == len(_job(size_name_job))
    for element, comment in lines:
        if comment.startswith(("fixed: ", "task", "job")):
            continue
        named = comment.split(", ")
        assert named and all(k in keys for k in named), (element, comment)
    where = {element.strip('"').split("=", 1)[0]: comment for element, comment in lines}
    assert where[f"{A}.tau_pos"] == "loss.sapo_temperature_pos"
    assert where[f"{A}.ppo_mini_batch_size"] == "optimization.steps_per_generation"


def _reversed_sum(prompt: str, width: int) -> str:
    a, b = prompt.rstrip("=").split("+")
    return str(int(a) + int(b)).zfill(width)[::-1]


def test_reward_scores_reference_answers_1_and_wrong_answers_0(size_name_job):
    # catches rows whose ground truth is not the answer, a reward that ignores the response, and a reward that
    # accepts another row's answer; the answers are recomputed here from the prompts
    cfg = load_config("gpu-gpt2-small")
    width = cfg.task.options["max_digits"] + 1
    rows = _rows(size_name_job, "dev")
    assert len(rows) == cfg.task.num_dev and len(_rows(size_name_job, "train")) == cfg.task.num_train
    for row in rows[:50]:
        prompt = row["prompt"][0]["content"]
        answer = _reversed_sum(prompt, width)
        assert row["reward_model"]["ground_truth"] == answer and row["prompt"][0]["role"] == "user"
        args = (row["data_source"], answer, answer, row["extra_info"])
        assert m.compute_score(*args) == 1.0
        wrong = answer[:-1] + str((int(answer[-1]) + 1) % 10)
        assert m.compute_score(row["data_source"], wrong, answer, row["extra_info"]) == 0.0
        assert m.compute_score(row["data_source"], "", answer, row["extra_info"]) == 0.0
    with pytest.raises(ValueError, match="not a sapo_lab row"):
        m.compute_score("openai/gsm8k", "1", "1", {})


def test_exported_reward_module_is_the_verifier(size_name_job):
    # catches a reward.py that defines its own scoring instead of calling the book's verifier
    spec = importlib.util.spec_from_file_location("exported_reward", os.path.join(size_name_job, "reward.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score is m.compute_score


@pytest.mark.parametrize(("argv", "key"), [
    (["--config", "cpu-tiny"], "max_train_time_s"),  # the laptop preset's wall-clock stop
    (["--config", "gpu-gpt2-small", "--loss_type", "gauss"], "loss.loss_type"),
    (["--config", "gpu-gpt2-small", "--loss_type", "sapo_directional"], "loss.loss_type"),
    (["--config", "gpu-gpt2-small", "--importance_sampling_level", "sequence"], "loss.importance_sampling_level"),
    (["--config", "gpu-gpt2-small", "--aggregation", "token_pool"], "loss.aggregation"),
    (["--config", "gpu-gpt2-small", "--max_log_ratio_policy", "skip"], "loss.max_log_ratio_policy"),
    (["--config", "gpu-gpt2-small", "--lr_scheduler_type", "linear"], "optimization.lr_scheduler_type"),
    (["--config", "gpu-gpt2-small", "--max_grad_norm", "0"], "optimization.max_grad_norm"),
    (["--config", "gpu-gpt2-small", "--steps_per_generation", "3"], "optimization.steps_per_generation"),
    (["--config", "gpu-gpt2-small", "--device", "cpu"], "device"),
    (["--config", "gpu-gpt2-small", "--device", "cuda:1"], "device"),
    (["--config", "gpu-gpt2-small", "--num_train", "10"], "task.num_train"),
    (["--config", "no-such-preset"], "no-such-preset"),
])
def test_refused_inputs_exit_2_with_one_line_naming_the_key(argv, key, tmp_path, capsys):
    # catches a value verl cannot reproduce being exported anyway, or a traceback instead of one line
    out = tmp_path / "job"
    assert main(["export-verl", *argv, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and key in err
    assert not (out / "run_verl.sh").exists()


def test_refuses_to_overwrite_an_export(size_name_job, capsys):
    assert main(["export-verl", "--config", "gpu-gpt2-small", "--output-dir", size_name_job]) == 2
    assert "which the export would replace" in capsys.readouterr().err


def test_refuses_to_replace_a_users_file_or_write_somewhere_odd(tmp_path, capsys):
    """From the outside test: a folder holding the user's own README.md was overwritten, an empty --output-dir
    wrote into the current folder, and a file as --output-dir gave a traceback. Each is now one line, exit 2."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("MY OWN README")
    (tmp_path / "afile").write_text("x")
    for out, expected in ((project, "README.md, which the export would replace"), ("", "empty path"),
                          (tmp_path / "afile", "is a file"), (tmp_path / "afile" / "sub", "cannot be created")):
        assert main(["export-verl", "--config", "gpu-gpt2-small", "--output-dir", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err
    assert (project / "README.md").read_text() == "MY OWN README" and not (project / "run_verl.sh").exists()
    assert main(["export-trl", "--config", "cpu-tiny", "--output-dir", str(project)]) == 2
    assert "README.md, which the export would replace" in capsys.readouterr().err


def test_cpu_tiny_without_its_time_limit_is_exported_through_the_cold_start(tmp_path):
    # catches a size name passed to verl as a hub name (verl would fail to download 'cpu-tiny')
    out = tmp_path / "tiny"
    assert main(["export-verl", "--config", "cpu-tiny", "--max_train_time_s", "0", "--output-dir", str(out)]) == 0
    assert _job(str(out))["actor_rollout_ref.model.path"].endswith("/coldstart/cold_start")


@pytest.mark.parametrize(("loss_type", "level", "aggregation", "mode", "agg"), [
    ("sapo", None, "per_response", "sapo", "seq-mean-token-mean"),
    ("grpo", None, "per_response", "vanilla", "seq-mean-token-mean"),
    ("grpo", None, "token_pool", "vanilla", "token-mean"),
    ("grpo", "sequence", "per_response", "gspo", "seq-mean-token-mean"),
    ("gspo", None, "token_pool", "gspo", "token-mean"),
])
def test_loss_mode_and_aggregation(loss_type, level, aggregation, mode, agg):
    # verl's names: vanilla is PPO's clip, gspo its sequence-ratio form; token-mean pools all tokens
    cfg = load_config("gpu-gpt2-small", {"loss.loss_type": loss_type, "loss.importance_sampling_level": level,
                                         "loss.aggregation": aggregation})
    ov = m.overrides(cfg)
    assert (ov[f"{A}.policy_loss.loss_mode"], ov[f"{A}.loss_agg_mode"]) == (mode, agg)


def test_staleness_is_prompts_over_mini_batch_times_epochs():
    assert m.staleness(64, 16, 1) == 4 and m.staleness(64, 16, 2) == 8
    with pytest.raises(ValueError):
        m.staleness(64, 24, 1)


@pytest.mark.parametrize("planted", [
    f"+{A}.policy_loss.tau_pos=1.3",  # verl's SAPO example scripts' spelling
    f"{A}.policy_loss.tau_neg=1.7",
    "algorithm.rollout_correction.bypass_mode=true",
    f"{A}.policy_loss.loss_mode=bypass_mode",
])
def test_misplaced_extra_overrides_are_refused_in_one_line(planted):
    with pytest.raises(ValueError, match="is refused") as exc:
        m.check_extra_overrides(["trainer.logger=[console,wandb]", planted])
    assert "\n" not in str(exc.value)
    m.check_extra_overrides(["trainer.logger=[console,wandb]", f"{A}.tau_pos=1.3"])  # the right place passes


def _run_script(job, *args, **env):
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    full = dict(os.environ, PATH=path, PYTHONPATH=ROOT, **env)
    return subprocess.run(["bash", os.path.join(job, "run_verl.sh"), *args], env=full, capture_output=True, text=True)


def test_run_script_stops_before_verl_on_a_planted_key_or_an_uneven_gpu_count(hf_job):
    # catches a run script that hands the example scripts' temperatures to verl (which would stop only after
    # Ray started), and a GPU count that does not divide the mini-batch's responses
    planted = _run_script(hf_job, f"+{A}.policy_loss.tau_pos=1.3")
    assert planted.returncode == 2 and planted.stderr.count("\n") == 1 and "policy_loss.tau_pos" in planted.stderr
    uneven = _run_script(hf_job, NGPUS="3")
    assert uneven.returncode == 2 and "must divide the 128 responses" in uneven.stderr  # 8 prompts x G = 16


def test_the_export_writes_the_temperatures_where_the_settings_reach_audit_saw_them_arrive():
    # the committed audit (results/conformance/settings_reach.json, verl section) and this export tell one story:
    # the spelling that reached verl's SAPO loss is the one exported, the spellings that did not are refused
    with open(os.path.join(ROOT, "results", "conformance", "settings_reach.json")) as f:
        settings = json.load(f)["verl"]["settings"]
    keys = {name: {o.split("=", 1)[0].lstrip("+") for o in s["overrides"]} for name, s in settings.items()}
    reached = [name for name, s in settings.items() if s["tau_reached"]]
    assert len(reached) == 1
    tau_keys = {k for k, sources in m.sources(load_config("gpu-gpt2-small")).items()
                if {"loss.sapo_temperature_pos", "loss.sapo_temperature_neg"} & set(sources)}
    assert tau_keys == keys[reached[0]]
    for s in settings.values():
        if not s["tau_reached"]:
            for override in s["overrides"]:
                with pytest.raises(ValueError, match="is refused"):
                    m.check_extra_overrides([override])


def test_the_epochs_cover_max_steps_and_no_more():
    # verl stops at whichever limit comes first: epochs rounded down would end cpu-tiny's 600 rollout steps at
    # 500 (8000 training prompts / 32 a rollout = 250 steps an epoch, so 3 epochs are needed, not 2)
    cfg = load_config("cpu-tiny", {"max_train_time_s": 0})
    per_epoch = cfg.task.num_train // cfg.rollout.prompts_per_rollout
    assert (per_epoch, cfg.optimization.max_steps) == (250, 600)  # the preset this arithmetic is about
    ov = m.overrides(cfg)
    assert ov["trainer.total_epochs"] == 3 and ov["trainer.total_training_steps"] == 600


@pytest.mark.parametrize(("epsilon_high", "high"), [(None, 0.2), (0.28, 0.28)])
def test_the_clips_upper_side_is_epsilon_high_when_set_else_epsilon(epsilon_high, high):
    # catches: clip_ratio_high written as epsilon even when epsilon_high is set (an asymmetric clip, DAPO's
    # clip-higher, exported as a symmetric one); unset, the upper side is epsilon, written explicitly
    cfg = load_config("cpu-tiny", {"loss.loss_type": "grpo", "loss.epsilon": 0.2, "loss.epsilon_high": epsilon_high,
                                   "max_train_time_s": 0})
    ov = m.overrides(cfg)
    assert (ov["actor_rollout_ref.actor.clip_ratio_low"], ov["actor_rollout_ref.actor.clip_ratio_high"]) == (0.2, high)


@pytest.mark.parametrize(("eval_temperature", "sample", "temperature"), [(0, False, 0), (0.5, True, 0.5), (None, True, 1.0)])
def test_validation_samples_at_the_eval_temperature(eval_temperature, sample, temperature):
    # catches the rollout temperature (1.0) sent to verl's validation when evaluation.eval_temperature is set,
    # and greedy evaluation (0) sampled anyway; unset, evaluation samples at the rollout temperature
    cfg = load_config("cpu-tiny", {"evaluation.eval_temperature": eval_temperature, "max_train_time_s": 0})
    assert cfg.rollout.temperature == 1.0
    ov = m.overrides(cfg)
    assert ov["actor_rollout_ref.rollout.val_kwargs.do_sample"] is sample
    assert ov["actor_rollout_ref.rollout.val_kwargs.temperature"] == temperature


def test_a_row_whose_ground_truth_is_not_its_problems_answer_is_refused(size_name_job):
    # catches a reward that scores a row against a ground truth its own problem does not give (a row edited or
    # mixed up after export would be scored silently against the wrong answer)
    row = _rows(size_name_job, "dev")[0]
    answer = row["reward_model"]["ground_truth"]
    other = answer[:-1] + str((int(answer[-1]) + 1) % 10)
    with pytest.raises(ValueError, match="differs from its problem's answer"):
        m.compute_score(row["data_source"], other, other, row["extra_info"])


def test_the_prompt_length_leaves_room_for_a_tokenizers_own_tokens(size_name_job):
    # catches data.max_prompt_length set to the longest prompt's characters alone: a tokenizer that adds a BOS or
    # a template's markers would then cut or drop the longest prompts; the longest is measured here from the rows
    longest = max(len(r["prompt"][0]["content"]) for split in ("train", "dev") for r in _rows(size_name_job, split))
    assert int(_job(size_name_job)["data.max_prompt_length"]) == longest + 8  # room for 8 tokens a tokenizer adds
    where = dict(commented_lines(os.path.join(size_name_job, "run_verl.sh")))
    assert where[f'"data.max_prompt_length={longest + 8}"'] == (f"task: the longest prompt ({longest} characters) plus 8 "
                                                                 "tokens a tokenizer may add")


@pytest.mark.parametrize(("value", "written"), [("true", "'true'"), ("null", "'null'"), (True, "true"), (None, "null"),
                                                ("sapo_lab", "sapo_lab"), (["a b", 2], "['a b',2]")])
def test_a_string_that_hydra_would_read_as_another_type_is_quoted(value, written):
    # catches the string 'true' (or 'null') written bare, which Hydra reads back as a bool (or None)
    from sapo_lab.integrations.verl_export import hydra_value

    assert hydra_value(value) == written


def test_a_local_model_folder_is_written_as_an_absolute_path(tmp_path, monkeypatch):
    # catches a relative folder written as given: run_verl.sh runs from wherever the user starts it (and Ray's
    # workers from their own folders), so a relative path would point elsewhere
    (tmp_path / "my_model").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["export-verl", "--config", "gpu-gpt2-small", "--model", "my_model", "--output-dir", "job"]) == 0
    assert _job(str(tmp_path / "job"))["actor_rollout_ref.model.path"] == str(tmp_path / "my_model")
