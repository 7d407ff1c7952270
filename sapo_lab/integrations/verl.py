"""The same SAPO run on verl: one declared config mapping to verl's Hydra overrides, and the reward function.

Tested against verl 0.9.1 (``framework_audit/requirements-verl.txt``; ``tests/integrations/test_verl_config.py`` composes
verl's own ``ppo_trainer`` config with the exported overrides in that environment). verl is never imported
here: the declared tables (:data:`MAPPING`, :data:`FIXED`, :data:`REFUSALS`, :data:`DIFFERENCES`) are plain
Python, so the book renders them and the main environment exports without verl.

Every leaf of :class:`sapo_lab.runs.config.TrainConfig` has exactly one row in :data:`MAPPING`: ``mapped``
(Hydra overrides of verl's config, converted as the note says), ``script`` (used by the exported job, not by
verl's config) or ``dropped`` (with the reason). A value verl cannot reproduce is refused (:data:`REFUSALS`),
never silently changed.

Where verl 0.9.1 reads what (read from the installed source): ``compute_policy_loss_sapo``
(``verl/trainer/ppo/core_algos.py``) takes the temperatures from the actor's ``ActorConfig.tau_pos`` /
``tau_neg`` (``actor_rollout_ref.actor.tau_pos``), not from ``policy_loss`` (``PolicyLossConfig`` has no such
field, so verl's example scripts' ``+actor_rollout_ref.actor.policy_loss.tau_pos`` stops at
``validate_config``; ``results/conformance/settings_reach.md``); it always aggregates with
``seq-mean-token-mean``, whatever ``loss_agg_mode`` says; the KL loss and the clip losses aggregate with
``actor.loss_agg_mode``. The actor splits each rollout batch of ``data.train_batch_size`` prompts x
``rollout.n`` responses into mini-batches of ``ppo_mini_batch_size`` prompts, for ``ppo_epochs`` passes, one
optimizer step each: the staleness M = ``train_batch_size / ppo_mini_batch_size x ppo_epochs``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

TESTED_VERL_VERSION = "0.9.1"
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"

# verl's policy loss (PolicyLossConfig.loss_mode) for sapo_lab's (loss_type, resolved importance-sampling level).
LOSS_MODES: dict[tuple[str, str], str] = {
    ("sapo", "token"): "sapo",
    ("grpo", "token"): "vanilla",
    ("grpo", "sequence"): "gspo",
    ("gspo", "sequence"): "gspo",
}
# verl's actor.loss_agg_mode for sapo_lab's loss.aggregation (verl's SAPO loss ignores it: per response only).
AGG_MODES = {"per_response": "seq-mean-token-mean", "token_pool": "token-mean"}
# sapo_lab's schedule -> verl's FSDP optimizer lr_scheduler_type; "linear" has no verl equivalent.
LR_SCHEDULES = {"constant": "constant", "constant_with_warmup": "constant", "cosine": "cosine"}
# Above verl's largest ratio: its losses clamp log r to [-20, 20], so r <= e^20 (about 4.9e8) < this.
DUAL_CLIP_OFF = 1e9
# The book's prompts are the whole prompt text: this template hands the user message to the tokenizer verbatim.
PLAIN_PROMPT_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
# Tokens a tokenizer may add around a prompt (a BOS, a leading-space piece); verl refuses longer prompts.
PROMPT_TOKEN_MARGIN = 8
# The verl data source of every exported row; the reward function refuses rows from any other.
DATA_SOURCE = "sapo_lab"
# Where the exported job keeps sapo_lab's cold start of a size-name model.
COLD_START_DIR = "coldstart"


@dataclass(frozen=True)
class FieldMapping:
    """One sapo_lab config key and where it goes in verl."""

    key: str  # dotted sapo_lab key
    verl: str  # the Hydra override keys it sets, or what in the exported job uses it; "" when dropped
    how: str  # "mapped" | "script" | "dropped"
    note: str  # the conversion, or why it is dropped
    convert: Callable | None = None  # cfg -> {override key: value}; only for "mapped"


def is_size_name(name: str) -> bool:
    """True for a sapo_lab model size (a character-level GPT-2 that sapo_lab builds and cold-starts itself)."""
    from ..training.model import MODEL_SIZES

    return name in MODEL_SIZES


def policy_path(cfg) -> str:
    """The model verl starts from: the name as given, or for a size name the exported cold start's directory."""
    from ..runs.run_folder import COLD_START

    name = cfg.model.name_or_path
    return f"{COLD_START_DIR}/{COLD_START}" if is_size_name(name) else name


def loss_mode(cfg) -> str | None:
    """verl's ``policy_loss.loss_mode`` for the config's loss and level (None: verl has none)."""
    return LOSS_MODES.get((cfg.loss.loss_type, cfg.loss.resolved_importance_sampling_level()))


def loss_agg_mode(cfg) -> str | None:
    """verl's ``actor.loss_agg_mode`` (None: verl's SAPO loss cannot pool tokens)."""
    if cfg.loss.aggregation == "token_pool" and loss_mode(cfg) == "sapo":
        return None
    return AGG_MODES[cfg.loss.aggregation]


def mini_batch_prompts(cfg) -> int:
    """``ppo_mini_batch_size``: prompts per optimizer step, prompts_per_rollout / M."""
    p, m = cfg.rollout.prompts_per_rollout, cfg.optimization.steps_per_generation
    if p % m:
        raise ValueError(
            f"config key 'optimization.steps_per_generation' = {m} cannot be exported to verl: verl splits a rollout "
            f"into mini-batches of whole prompts, and rollout.prompts_per_rollout = {p} does not divide by it"
        )
    return p // m


def staleness(train_batch_size: int, ppo_mini_batch_size: int, ppo_epochs: int) -> int:
    """verl's optimizer steps per rollout batch (M): train_batch_size / ppo_mini_batch_size x ppo_epochs."""
    if train_batch_size % ppo_mini_batch_size:
        raise ValueError(f"train_batch_size {train_batch_size} does not split into mini-batches of {ppo_mini_batch_size}")
    return train_batch_size // ppo_mini_batch_size * ppo_epochs


def total_epochs(cfg) -> int:
    """Epochs over the training file that cover max_steps rollout steps (verl stops at the first limit reached)."""
    per_epoch = cfg.task.num_train // cfg.rollout.prompts_per_rollout
    if per_epoch < 1:
        raise ValueError(
            f"config key 'task.num_train' = {cfg.task.num_train} cannot be exported to verl: one rollout needs "
            f"rollout.prompts_per_rollout = {cfg.rollout.prompts_per_rollout} training prompts"
        )
    return max(1, math.ceil(cfg.optimization.max_steps / per_epoch))


def warmup_rollout_steps(cfg) -> int:
    """verl's ``lr_warmup_steps`` (it steps the schedule once per rollout step): warmup_steps / M, rounded up."""
    o = cfg.optimization
    if o.lr_scheduler_type == "constant":
        return 0
    return math.ceil(o.warmup_steps / o.steps_per_generation)


def _eval_sampling(cfg) -> dict:
    t = cfg.evaluation.eval_temperature
    t = cfg.rollout.temperature if t is None else t
    if t == 0:
        return {f"{ROLLOUT}.val_kwargs.do_sample": False, f"{ROLLOUT}.val_kwargs.temperature": 0}
    return {f"{ROLLOUT}.val_kwargs.do_sample": True, f"{ROLLOUT}.val_kwargs.temperature": t}


def _loss_mode_note() -> str:
    pairs = ", ".join(f"{k} at {lvl} level -> {v}" for (k, lvl), v in LOSS_MODES.items())
    return f"{pairs}; any other kernel or level is refused (verl has no policy loss with that gate)"


def _betas(cfg) -> dict:
    return {f"{ACTOR}.optim.betas": [cfg.optimization.adam_beta1, cfg.optimization.adam_beta2]}


_RESULTS = ("held-out Pass@1 is measured after training by sapo_lab's own evaluator "
            "(`python -m sapo_lab eval --config config.json --model MERGED_HF_DIR`)")
_COLD = ("used only when the model is a sapo_lab size name: the cold-start step of run_verl.sh "
         "(`sapo_lab train` with max_steps 0)")

MAPPING: tuple[FieldMapping, ...] = (
    FieldMapping("model.name_or_path", "actor_rollout_ref.model.path", "mapped",
                 "a Hugging Face directory or hub name is loaded as is; a sapo_lab size name is cold-started by "
                 "sapo_lab first and verl starts from that run's cold_start/ directory (its character tokenizer "
                 "included); prompts go to the tokenizer verbatim (model.custom_chat_template)",
                 lambda cfg: {"actor_rollout_ref.model.path": policy_path(cfg),
                              "actor_rollout_ref.model.custom_chat_template": PLAIN_PROMPT_TEMPLATE}),
    *(FieldMapping(f"task.{k}", "data.train_files, data.val_files", "script",
                   "the frozen splits: the train split becomes data/train.jsonl, the dev split data/dev.jsonl "
                   "(data.max_prompt_length: the longest prompt's characters plus a margin)")
      for k in ("name", "options", "split_seed", "num_train", "num_dev")),
    FieldMapping("task.num_eval", "", "script", "the eval split stays with sapo_lab's evaluator: " + _RESULTS),
    *(FieldMapping(f"cold_start.{k}", "run_verl.sh cold-start step", "script", _COLD)
      for k in ("max_updates", "batch_size", "sft_learning_rate", "target_pass1", "eval_every", "cache_dir")),
    FieldMapping("rollout.prompts_per_rollout", "data.train_batch_size", "mapped", "same (prompts in both)",
                 lambda cfg: {"data.train_batch_size": cfg.rollout.prompts_per_rollout}),
    FieldMapping("rollout.num_generations", f"{ROLLOUT}.n", "mapped", "G: same",
                 lambda cfg: {f"{ROLLOUT}.n": cfg.rollout.num_generations}),
    FieldMapping("rollout.max_completion_length", "data.max_response_length", "mapped",
                 "same (tokens, EOS included; rollout.response_length follows it)",
                 lambda cfg: {"data.max_response_length": cfg.rollout.max_completion_length}),
    FieldMapping("rollout.temperature", f"{ROLLOUT}.temperature", "mapped",
                 "same; verl also divides the training forward's logits by it",
                 lambda cfg: {f"{ROLLOUT}.temperature": cfg.rollout.temperature}),
    FieldMapping("optimization.max_steps", "trainer.total_training_steps, trainer.total_epochs", "mapped",
                 "rollout steps in both; total_epochs covers them (verl stops at whichever comes first)",
                 lambda cfg: {"trainer.total_training_steps": cfg.optimization.max_steps,
                              "trainer.total_epochs": total_epochs(cfg)}),
    FieldMapping("optimization.steps_per_generation", f"{ACTOR}.ppo_mini_batch_size", "mapped",
                 "M: ppo_mini_batch_size = prompts_per_rollout / M prompts, with ppo_epochs = 1 (FIXED), so "
                 "train_batch_size / ppo_mini_batch_size x ppo_epochs = M; refused when M does not divide the prompts",
                 lambda cfg: {f"{ACTOR}.ppo_mini_batch_size": mini_batch_prompts(cfg)}),
    FieldMapping("optimization.learning_rate", f"{ACTOR}.optim.lr", "mapped", "same (AdamW)",
                 lambda cfg: {f"{ACTOR}.optim.lr": cfg.optimization.learning_rate}),
    FieldMapping("optimization.lr_scheduler_type", f"{ACTOR}.optim.lr_scheduler_type", "mapped",
                 "constant and constant_with_warmup -> constant (warmup from lr_warmup_steps), cosine -> cosine "
                 "decaying to 0 over half a cycle, as transformers' schedule; linear is refused",
                 lambda cfg: {f"{ACTOR}.optim.lr_scheduler_type": LR_SCHEDULES[cfg.optimization.lr_scheduler_type],
                              f"{ACTOR}.optim.min_lr_ratio": 0.0, f"{ACTOR}.optim.num_cycles": 0.5}),
    FieldMapping("optimization.warmup_steps", f"{ACTOR}.optim.lr_warmup_steps", "mapped",
                 "optimizer steps / M, rounded up: verl steps the schedule once per rollout step "
                 "(0 under the plain constant schedule, which has no warmup)",
                 lambda cfg: {f"{ACTOR}.optim.lr_warmup_steps": warmup_rollout_steps(cfg)}),
    FieldMapping("optimization.weight_decay", f"{ACTOR}.optim.weight_decay", "mapped",
                 "same (AdamW; verl's default is 0.01, so it is always written)",
                 lambda cfg: {f"{ACTOR}.optim.weight_decay": cfg.optimization.weight_decay}),
    FieldMapping("optimization.adam_beta1", f"{ACTOR}.optim.betas", "mapped", "betas[0]", _betas),
    FieldMapping("optimization.adam_beta2", f"{ACTOR}.optim.betas", "mapped", "betas[1]", _betas),
    FieldMapping("optimization.max_grad_norm", f"{ACTOR}.optim.clip_grad", "mapped",
                 "same; 0 (no clipping in sapo_lab) is refused: verl always clips, and at 0 it zeroes every gradient",
                 lambda cfg: {f"{ACTOR}.optim.clip_grad": cfg.optimization.max_grad_norm}),
    FieldMapping("optimization.beta", f"{ACTOR}.use_kl_loss, {ACTOR}.kl_loss_coef, {ACTOR}.kl_loss_type", "mapped",
                 "beta > 0: the KL loss with coefficient beta and verl's low_var_kl (the same k3 estimator, "
                 "clamped to [-10, 10]) to the initial model, aggregated like the policy loss; 0: no KL, no reference",
                 lambda cfg: {f"{ACTOR}.use_kl_loss": cfg.optimization.beta > 0,
                              f"{ACTOR}.kl_loss_coef": cfg.optimization.beta,
                              f"{ACTOR}.kl_loss_type": "low_var_kl"}),
    FieldMapping("optimization.skip_zero_advantage", "", "dropped",
                 "a compute saving with an identical update (tested in sapo_lab); verl always runs every response"),
    FieldMapping("loss.loss_type", f"{ACTOR}.policy_loss.loss_mode", "mapped", _loss_mode_note(),
                 lambda cfg: {f"{ACTOR}.policy_loss.loss_mode": loss_mode(cfg)}),
    FieldMapping("loss.sapo_temperature_pos", f"{ACTOR}.tau_pos", "mapped",
                 "tau_pos: the ActorConfig field compute_policy_loss_sapo reads (never policy_loss.tau_pos)",
                 lambda cfg: {f"{ACTOR}.tau_pos": cfg.loss.sapo_temperature_pos}),
    FieldMapping("loss.sapo_temperature_neg", f"{ACTOR}.tau_neg", "mapped",
                 "tau_neg: the ActorConfig field compute_policy_loss_sapo reads (never policy_loss.tau_neg)",
                 lambda cfg: {f"{ACTOR}.tau_neg": cfg.loss.sapo_temperature_neg}),
    FieldMapping("loss.epsilon", f"{ACTOR}.clip_ratio_low", "mapped", "same (clip losses only)",
                 lambda cfg: {f"{ACTOR}.clip_ratio_low": cfg.loss.epsilon}),
    FieldMapping("loss.epsilon_high", f"{ACTOR}.clip_ratio_high", "mapped", "same; null becomes epsilon explicitly",
                 lambda cfg: {f"{ACTOR}.clip_ratio_high": cfg.loss.epsilon if cfg.loss.epsilon_high is None
                              else cfg.loss.epsilon_high}),
    FieldMapping("loss.importance_sampling_level", f"{ACTOR}.policy_loss.loss_mode", "mapped",
                 "null resolved as sapo_lab does; the sequence level of the clip is verl's gspo; "
                 "SAPO at sequence level is refused (verl's SAPO gate acts on token ratios)",
                 lambda cfg: {f"{ACTOR}.policy_loss.loss_mode": loss_mode(cfg)}),
    FieldMapping("loss.aggregation", f"{ACTOR}.loss_agg_mode", "mapped",
                 "per_response -> seq-mean-token-mean, token_pool -> token-mean (clip losses only: verl's SAPO "
                 "loss always averages per response); the KL loss follows it, as in sapo_lab",
                 lambda cfg: {f"{ACTOR}.loss_agg_mode": loss_agg_mode(cfg)}),
    FieldMapping("loss.max_log_ratio", "", "dropped",
                 "a diagnostic threshold under max_log_ratio_policy='record'; verl does not count such tokens"),
    FieldMapping("loss.max_log_ratio_policy", "", "dropped",
                 "'record' changes no update, so dropping it is exact; 'skip' and 'error' are refused"),
    FieldMapping("evaluation.dev_every", "trainer.test_freq", "mapped",
                 "verl's validation on data/dev.jsonl every this many rollout steps: the dev Pass@1 monitor",
                 lambda cfg: {"trainer.test_freq": cfg.evaluation.dev_every}),
    FieldMapping("evaluation.dev_prompts", "data.val_max_samples", "mapped",
                 "the first dev prompts, one sample each (rollout.val_kwargs.n = 1, FIXED)",
                 lambda cfg: {"data.val_max_samples": cfg.evaluation.dev_prompts}),
    FieldMapping("evaluation.eval_temperature", f"{ROLLOUT}.val_kwargs.temperature, do_sample", "mapped",
                 "the dev monitor's temperature (null: the rollout's; 0: greedy); held-out evaluation: " + _RESULTS,
                 _eval_sampling),
    *(FieldMapping(f"evaluation.{k}", "", "dropped", _RESULTS)
      for k in ("num_samples", "pass_k", "greedy", "gradient_comparison_every")),
    FieldMapping("seed", "data.seed, actor.data_loader_seed, rollout.seed", "mapped",
                 "same number; the random streams differ, so runs are not bit-identical",
                 lambda cfg: {"data.seed": cfg.seed, f"{ACTOR}.data_loader_seed": cfg.seed, f"{ROLLOUT}.seed": cfg.seed}),
    FieldMapping("device", "trainer.device", "mapped",
                 "'auto'/'cuda' -> cuda (choose GPUs with CUDA_VISIBLE_DEVICES); 'cpu' and 'cuda:N' are refused",
                 lambda cfg: {"trainer.device": "cuda"}),
    FieldMapping("save_steps", "trainer.save_freq", "mapped", "same (rollout steps in both)",
                 lambda cfg: {"trainer.save_freq": cfg.save_steps}),
    FieldMapping("max_train_time_s", "", "dropped",
                 "0 (no limit) only: verl has no wall-clock stop, so a limit is refused rather than ignored"),
    FieldMapping("threads", "", "dropped",
                 "torch CPU threads of sapo_lab's own process; verl's workers are placed by Ray (no effect on results)"),
)

# verl settings that sapo_lab's algorithm implies, written explicitly (some differ from verl's defaults).
FIXED: dict = {  # key: (value, why)
    "algorithm.adv_estimator": ("grpo", "group-relative advantages (see DIFFERENCES for the std)"),
    "algorithm.norm_adv_by_std_in_grpo": (True, "advantages divided by the group's std"),
    "algorithm.use_kl_in_reward": (False, "the KL is a loss term (optimization.beta), never a reward penalty"),
    "algorithm.rollout_correction.bypass_mode": (False, "the ratio's old policy is recomputed by the trainer"),
    "algorithm.rollout_correction.rollout_is": (None, "no rollout importance weights"),
    "algorithm.rollout_correction.rollout_rs": (None, "no rollout rejection sampling"),
    f"{ACTOR}.ppo_epochs": (1, "each response is trained in exactly one of the M mini-batches"),
    f"{ACTOR}.shuffle": (True, "responses are shuffled into the mini-batches, as sapo_lab does"),
    f"{ACTOR}.clip_ratio_c": (DUAL_CLIP_OFF, "verl's dual clip (default 3) is not in sapo_lab's GRPO: out of reach"),
    f"{ACTOR}.entropy_coeff": (0, "no entropy bonus"),
    f"{ACTOR}.use_dynamic_bsz": (True, "micro-batches by token count: memory only, the loss is normalised per mini-batch"),
    f"{ACTOR}.optim.lr_warmup_steps_ratio": (0.0, "warmup comes from lr_warmup_steps alone"),
    f"{ROLLOUT}.name": ("vllm", "the rollout engine (sglang also works)"),
    f"{ROLLOUT}.tensor_model_parallel_size": (1, "verl's default 2 needs two GPUs per model copy"),
    f"{ROLLOUT}.top_k": (-1, "plain sampling at the temperature, as sapo_lab's rollout"),
    f"{ROLLOUT}.top_p": (1.0, "plain sampling at the temperature, as sapo_lab's rollout"),
    f"{ROLLOUT}.do_sample": (True, "plain sampling at the temperature, as sapo_lab's rollout"),
    f"{ROLLOUT}.val_kwargs.n": (1, "one sample per dev prompt, as sapo_lab's dev monitor"),
    f"{ROLLOUT}.val_kwargs.top_k": (-1, "plain sampling, as sapo_lab's dev monitor"),
    f"{ROLLOUT}.val_kwargs.top_p": (1.0, "plain sampling, as sapo_lab's dev monitor"),
    "reward.custom_reward_function.name": ("compute_score", "the function in reward.py"),
    "trainer.val_before_train": (True, "dev Pass@1 of the starting policy, as sapo_lab's first dev row"),
    "trainer.logger": (["console"], "add wandb etc. as an extra override"),
}

# Values verl cannot reproduce: (key, test on the config, reason).
REFUSALS: tuple[tuple[str, Callable, str], ...] = (
    ("loss.loss_type", lambda cfg: cfg.loss.loss_type not in {kernel for kernel, _ in LOSS_MODES},
     "verl has no policy loss with this kernel's gate (it has sapo, vanilla = grpo and gspo)"),
    ("loss.importance_sampling_level", lambda cfg: loss_mode(cfg) is None,
     "verl's SAPO loss gates token ratios only; there is no sequence-level SAPO in verl"),
    ("loss.aggregation", lambda cfg: loss_agg_mode(cfg) is None,
     "verl's SAPO loss always averages per response (seq-mean-token-mean) and ignores loss_agg_mode"),
    ("loss.max_log_ratio_policy", lambda cfg: cfg.loss.max_log_ratio_policy != "record",
     "verl cannot skip or refuse tokens beyond max_log_ratio; use 'record' to export"),
    ("optimization.lr_scheduler_type", lambda cfg: cfg.optimization.lr_scheduler_type not in LR_SCHEDULES,
     "verl's FSDP optimizer has only the constant and cosine schedules (with warmup)"),
    ("optimization.max_grad_norm", lambda cfg: cfg.optimization.max_grad_norm == 0,
     "verl always clips the gradient norm, and clip_grad = 0 would zero every gradient; set a positive norm"),
    ("device", lambda cfg: cfg.device not in ("auto", "cuda"),
     "verl trains on GPUs placed by Ray: use 'auto' or 'cuda' and choose GPUs with CUDA_VISIBLE_DEVICES"),
    ("max_train_time_s", lambda cfg: cfg.max_train_time_s != 0,
     "verl has no wall-clock stop; set it to 0 and bound the run with optimization.max_steps"),
)

# Where the two implementations differ on purpose, and what each difference does.
DIFFERENCES: tuple[dict, ...] = (
    {"topic": "truncated responses",
     "sapo_lab": "a response without EOS within max_completion_length is 'truncated', reward 0",
     "verl": "compute_score receives the response decoded without special tokens and no length",
     "effect": "the exported reward cannot see truncation and scores the text as if finished: a truncated response "
               "whose text strips to exactly the answer (the answer, then only whitespace or special tokens) scores 1 "
               "in verl and 0 in sapo_lab; every other verdict is the same"},
    {"topic": "behavior log-probs",
     "sapo_lab": "taken from the sampling pass itself",
     "verl": "recomputed by the trainer's forward pass after vLLM sampled (rollout correction off, FIXED)",
     "effect": "the same numbers up to the two engines' floating-point differences (bf16 in verl)"},
    {"topic": "advantage scale",
     "sapo_lab": "(R - mean) / (population std + 1e-6)",
     "verl": "(R - mean) / (sample std with Bessel's correction + 1e-6)",
     "effect": "verl's advantages are about sqrt((G-1)/G) times sapo_lab's: a uniform scale that Adam almost removes, "
               "but that gradient clipping and the KL weight see"},
    {"topic": "prompt draw",
     "sapo_lab": "each rollout draws prompts_per_rollout training prompts with replacement",
     "verl": "epochs over the shuffled training file without replacement",
     "effect": "the same distribution of prompts per step; a prompt recurs only after an epoch in verl"},
    {"topic": "learning-rate schedule",
     "sapo_lab": "advances every optimizer step",
     "verl": "advances once per rollout step (after its M mini-batches)",
     "effect": "identical after warmup under the constant schedule; during warmup and under cosine the M updates "
               "of one rollout share one rate in verl"},
    {"topic": "extreme ratios",
     "sapo_lab": "SAPO's gradient r w(r) is evaluated in log space: an overflowing ratio gets exactly 0",
     "verl": "clamps log r to [-20, 20] before the gate (GSPO: the sequence log ratio to at most 10)",
     "effect": "identical for |log r| < 20; beyond, both give SAPO a zero gradient (the clamp passes none)"},
)


def mapping_rows() -> list[dict]:
    """The declared mapping as plain rows (key, verl, how, note), for tables."""
    return [{"key": m.key, "verl": m.verl, "how": m.how, "note": m.note} for m in MAPPING]


def check_supported(cfg) -> None:
    """Raise ``ValueError`` naming the first config value verl cannot reproduce."""
    for key, refused, reason in REFUSALS:
        if refused(cfg):
            section, _, leaf = key.rpartition(".")
            value = getattr(getattr(cfg, section) if section else cfg, leaf)
            raise ValueError(f"config key {key!r} = {value!r} cannot be exported to verl: {reason}")
    mini_batch_prompts(cfg)
    total_epochs(cfg)


def overrides(cfg) -> dict:
    """verl's Hydra overrides for ``cfg`` (dotted key -> value): :data:`FIXED`, then each mapped row."""
    check_supported(cfg)
    out = {key: value for key, (value, _why) in FIXED.items()}
    for m in MAPPING:
        if m.how == "mapped":
            out.update(m.convert(cfg))
    return out


def sources(cfg) -> dict:
    """Which config keys each override comes from (override key -> [sapo_lab keys]); FIXED ones map to []."""
    out: dict = {k: [] for k in FIXED}
    for m in MAPPING:
        if m.how == "mapped":
            for k in m.convert(cfg):
                out.setdefault(k, []).append(m.key)
    return out


# ---------------------------------------------------------------- overrides a user adds to the exported job

# Override keys that compose in verl's config but do not act where the export relies on them.
MISPLACED = {
    f"{ACTOR}.policy_loss.tau_pos": f"the SAPO loss reads {ACTOR}.tau_pos; PolicyLossConfig has no tau_pos, "
                                    "so verl's validate_config stops the run",
    f"{ACTOR}.policy_loss.tau_neg": f"the SAPO loss reads {ACTOR}.tau_neg; PolicyLossConfig has no tau_neg, "
                                    "so verl's validate_config stops the run",
}
# Overrides that change where the ratio's denominator comes from or what multiplies the loss.
RATIO_SOURCE = ("algorithm.rollout_correction.", f"{ACTOR}.policy_loss.rollout_correction.")


def check_extra_overrides(extra: list[str]) -> None:
    """Refuse (one-line ``ValueError``) an extra Hydra override that would not do what it says in this job.

    The temperatures in ``policy_loss`` (verl's SAPO example scripts' spelling), and any rollout-correction or
    bypass setting: those make the ratio's old policy the rollout engine's, which this export does not model.
    """
    for item in extra:
        key = item.split("=", 1)[0].lstrip("+~")
        if key in MISPLACED:
            raise ValueError(f"override {item!r} is refused: {MISPLACED[key]}")
        if key.startswith(RATIO_SOURCE) or (key == f"{ACTOR}.policy_loss.loss_mode" and "bypass" in item):
            raise ValueError(f"override {item!r} is refused: rollout correction and bypass mode change where the "
                             "ratio's old policy comes from; the export fixes them off")


# ---------------------------------------------------------------- the data rows and the reward function


def problem_row(problem, task_name: str, task_options: dict, split: str, index: int) -> dict:
    """One verl data row: the prompt as one user message, the answer as ground truth, the problem in extra_info."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": problem.prompt}],
        "ability": "arithmetic",
        "reward_model": {"style": "rule", "ground_truth": problem.answer},
        # the options as JSON text: an empty mapping has no columnar type in parquet or datasets' JSON reader
        "extra_info": {"split": split, "index": index, "task": task_name,
                       "task_options": json.dumps(task_options, sort_keys=True),
                       "problem": dataclasses.asdict(problem)},
    }


_TASKS: dict = {}


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """verl's reward function for an exported row: the task's own verifier on the decoded response.

    The response is scored as finished (verl passes no EOS or length: see :data:`DIFFERENCES`). A row that
    is not sapo_lab's, or whose ground truth disagrees with its problem, raises ``ValueError``.
    """
    from ..tasks import make_task

    if data_source != DATA_SOURCE or not isinstance(extra_info, dict) or "problem" not in extra_info:
        raise ValueError(f"not a sapo_lab row (data_source {data_source!r}); export it with `sapo_lab export-verl`")
    key = (extra_info["task"], extra_info["task_options"])
    if key not in _TASKS:
        _TASKS[key] = make_task(key[0], json.loads(key[1]))
    task = _TASKS[key]
    problem_cls = getattr(task, "Problem", None)
    if problem_cls is None:
        from ..tasks import Problem as problem_cls
    problem = problem_cls(**extra_info["problem"])
    if problem.answer != ground_truth:
        raise ValueError(f"row ground truth {ground_truth!r} differs from its problem's answer {problem.answer!r}")
    reward, _reason = task.verify(solution_str, True, problem)
    return float(reward)
