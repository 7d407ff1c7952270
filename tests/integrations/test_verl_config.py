"""An exported verl job, composed with verl's own config: every setting lands where verl's code reads it.

Runs in verl's pinned environment (framework_audit/.venv-verl-hydra: verl 0.9.1, Hydra, torch; no GPU, no Ray
workers): ``bash tools/ci_verl_export.sh``. The export itself runs in the main environment (``.venv``, or
``$SAPO_LAB_MAIN_PYTHON``), exactly as a user runs it; the test reads the Hydra overrides as bash hands them to
``verl.trainer.main_ppo``, composes ``ppo_trainer.yaml`` with them through Hydra, runs verl's
``validate_config`` and ``ActorConfig`` conversion (what ``main_ppo`` and the actor worker do), and calls verl's
SAPO loss, its reward-function loader and its prompt tokenizer with the result. Skipped where verl is not installed.
"""

import json
import os
import subprocess
import sys
import warnings

import pytest

if not os.environ.get("SAPO_LAB_REQUIRE_VERL"):  # the verl leg sets it: there a missing verl fails, never skips
    pytest.importorskip("hydra", reason="composing verl's config needs Hydra: bash tools/ci_verl_export.sh")
    pytest.importorskip("verl", reason="verl is not installed here: bash tools/ci_verl_export.sh")

import hydra  # noqa: E402, F401
import torch  # noqa: E402
from _verl_job import script_overrides  # noqa: E402
from verl.trainer.ppo.core_algos import compute_policy_loss_sapo, get_policy_loss_fn  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass, validate_config  # noqa: E402

from framework_audit.settings_reach_verl import compose, tau_seen_by_loss  # noqa: E402
from sapo_lab.integrations.verl import check_extra_overrides  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN_PYTHON = os.environ.get("SAPO_LAB_MAIN_PYTHON", os.path.join(ROOT, ".venv", "bin", "python"))
PLANTED = "+actor_rollout_ref.actor.policy_loss.tau_pos=1.3"  # verl's SAPO example scripts' spelling
# Settings that differ from verl's defaults (tau 1.0 / 1.05, lr 1e-6, KL off, mini-batch 256 prompts).
CHANGED = ["--sapo_temperature_pos", "1.3", "--sapo_temperature_neg", "1.7", "--beta", "0.02",
           "--learning_rate", "3e-5", "--steps_per_generation", "8", "--lr_scheduler_type", "cosine"]

warnings.simplefilter("ignore", FutureWarning)  # Hydra 1.3 on omegaconf 2.4: version-string notices


def _export(out, *argv):
    proc = subprocess.run([MAIN_PYTHON, "-m", "sapo_lab", "export-verl", *argv, "--output-dir", out], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    if not os.path.exists(MAIN_PYTHON):
        pytest.fail(f"the main environment's Python {MAIN_PYTHON} is missing (make book, or set SAPO_LAB_MAIN_PYTHON)")
    base = tmp_path_factory.mktemp("verl_jobs")
    return {
        "size_name": _export(str(base / "gpt2"), "--config", "gpu-gpt2-small"),
        "hf": _export(str(base / "hf"), "--config", "gpu-gpt2-small", "--model", "Qwen/Qwen2.5-0.5B", *CHANGED),
    }


def _composed(job, *extra):
    return compose(script_overrides(os.path.join(job, "run_verl.sh")) + list(extra))


def _book(job):
    with open(os.path.join(job, "config.json")) as f:
        return json.load(f)


def _validated_actor(cfg):
    """main_ppo's own check, then the actor worker's conversion to ActorConfig."""
    validate_config(config=cfg, use_reference_policy=cfg.actor_rollout_ref.actor.use_kl_loss, use_critic=False)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def test_verl_accepts_the_exported_preset(jobs):
    # catches an override verl's config refuses, a key that composes but fails validation, and M, G or the
    # temperatures lost between the book's config and verl's; expected values are the exported config.json's
    cfg = _composed(jobs["size_name"])
    actor = _validated_actor(cfg)
    book = _book(jobs["size_name"])
    m = cfg.data.train_batch_size // actor.ppo_mini_batch_size * actor.ppo_epochs  # verl's staleness
    assert cfg.data.train_batch_size % actor.ppo_mini_batch_size == 0
    assert m == book["optimization"]["steps_per_generation"]
    assert cfg.actor_rollout_ref.rollout.n == actor.rollout_n == book["rollout"]["num_generations"]
    assert (actor.tau_pos, actor.tau_neg) == (book["loss"]["sapo_temperature_pos"], book["loss"]["sapo_temperature_neg"])
    assert actor.policy_loss.loss_mode == "sapo" and actor.optim.lr == book["optimization"]["learning_rate"]
    assert cfg.actor_rollout_ref.model.path.endswith("/coldstart/cold_start")


def test_changed_settings_land_where_verls_code_reads_them(jobs):
    # catches a temperature, learning rate, KL or batch size left at verl's default, and the temperatures put
    # where the SAPO loss does not read them: the loss itself is called and its gate's temperatures observed
    cfg = _composed(jobs["hf"])
    actor = _validated_actor(cfg)
    assert get_policy_loss_fn(actor.policy_loss.loss_mode) is compute_policy_loss_sapo
    assert tau_seen_by_loss(actor) == {"tau_pos": [1.3], "tau_neg": [1.7]}
    assert cfg.data.train_batch_size // actor.ppo_mini_batch_size * actor.ppo_epochs == 8
    assert actor.optim.lr == 3e-5 and actor.optim.lr_scheduler_type == "cosine"
    assert actor.optim.lr_warmup_steps == 3  # the preset's 20 optimizer steps at M = 8, in rollout steps
    assert (actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type) == (True, 0.02, "low_var_kl")
    assert actor.loss_agg_mode == "seq-mean-token-mean"  # the KL loss's aggregation: per response, as the book's
    assert cfg.actor_rollout_ref.rollout.n == 16 and cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-0.5B"


def test_verls_sapo_loss_averages_per_response(jobs):
    # what the mapping's per_response row rests on: verl's SAPO loss is the mean over responses of each response's
    # token mean of -(4 / tau) sigmoid(tau (r - 1)) A, written out here with the exported temperatures
    actor = _validated_actor(_composed(jobs["hf"]))
    logp = torch.tensor([[-0.2, 0.3, 0.1, 0.0], [0.4, -0.5, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0] * 4, [-1.0] * 4], dtype=torch.float64)
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=2)
    loss, _ = compute_policy_loss_sapo(torch.zeros_like(logp), logp, adv, mask, config=actor)
    tau = torch.where(adv > 0, torch.tensor(1.3, dtype=torch.float64), torch.tensor(1.7, dtype=torch.float64))
    per_token = -(4 / tau) * torch.sigmoid(tau * (torch.exp(logp) - 1)) * adv
    expected = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    assert torch.allclose(loss, expected, rtol=1e-6, atol=0)


def test_the_example_scripts_temperature_key_is_refused(jobs):
    # the planted misplaced key: verl composes it and then stops at validate_config; the export's guard says so
    # in one line before verl starts
    cfg = _composed(jobs["hf"], PLANTED)
    with pytest.raises(Exception, match="unexpected keyword argument 'tau_pos'"):
        _validated_actor(cfg)
    with pytest.raises(ValueError, match="is refused") as exc:
        check_extra_overrides([PLANTED])
    assert "\n" not in str(exc.value)
    env = {**os.environ, "PYTHONPATH": ROOT, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])}
    proc = subprocess.run(["bash", os.path.join(jobs["hf"], "run_verl.sh"), PLANTED], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "policy_loss.tau_pos" in proc.stderr


def _reversed_sum(prompt: str, width: int) -> str:
    a, b = prompt.rstrip("=").split("+")
    return str(int(a) + int(b)).zfill(width)[::-1]


def test_verls_reward_loader_scores_reference_answers_1_and_wrong_answers_0(jobs):
    # catches a reward path verl cannot load, a function under another name, and rows whose ground truth is not
    # the answer (recomputed here from the prompt)
    job = jobs["size_name"]
    reward = get_custom_reward_fn(_composed(job))
    width = _book(job)["task"]["options"]["max_digits"] + 1
    with open(os.path.join(job, "data", "dev.jsonl")) as f:
        rows = [json.loads(line) for line in f][:40]
    for row in rows:
        answer = _reversed_sum(row["prompt"][0]["content"], width)
        wrong = answer[::-1] if answer != answer[::-1] else answer[:-1] + str((int(answer[-1]) + 1) % 10)
        call = dict(data_source=row["data_source"], ground_truth=row["reward_model"]["ground_truth"],
                    extra_info=row["extra_info"])
        assert reward(solution_str=answer, **call) == 1.0
        assert reward(solution_str=wrong, **call) == 0.0


def test_prompts_reach_the_size_name_policy_as_the_book_tokenizes_them(jobs):
    # catches a chat template that wraps the book's prompt (verl renders every prompt through one) and a
    # max_prompt_length verl would refuse: verl's own prompt builder against sapo_lab's encoding
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from sapo_lab.tasks import make_task
    from sapo_lab.training.tokenizer import build_char_tokenizer

    job = jobs["size_name"]
    cfg = _composed(job)
    book = _book(job)
    tok = build_char_tokenizer(make_task(book["task"]["name"], book["task"]["options"]).alphabet)
    tok.chat_template = cfg.actor_rollout_ref.model.custom_chat_template
    builder = create_continuous_token_builder(tok, hf_model_type="gpt2")
    with open(os.path.join(job, "data", "dev.jsonl")) as f:
        rows = [json.loads(line) for line in f][:20]
    for row in rows:
        ids = builder.build_initial_tokens(row["prompt"])
        assert ids == tok(row["prompt"][0]["content"], add_special_tokens=False)["input_ids"]
        assert len(ids) <= cfg.data.max_prompt_length
