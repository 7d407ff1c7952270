"""The SAPO / GRPO / GSPO training loop (Algorithms 1 and 2 of the review).

Each rollout step:

1. draw ``prompts_per_rollout`` training prompts; the current model, frozen for the
   duration of sampling, samples ``num_generations`` responses per prompt with their
   behavior log-probs (:mod:`sapo_lab.rollout`);
2. the verifier scores them and :func:`group_advantages` normalises rewards per group;
3. the responses are shuffled into ``steps_per_generation`` (K) minibatches; each gets
   teacher-forced current log-probs, :func:`policy_loss` with the configured
   ``loss_type``, one backward and one AdamW step. Minibatches after the first are
   therefore trained on data sampled by an older policy, as in the paper. Responses
   whose advantage is exactly 0 add nothing to the policy gradient; with
   ``skip_zero_advantage`` (default, only when ``beta == 0``) they are left out of the
   forward/backward and the loss is rescaled to the full minibatch's normalisation,
   which gives the same update for less compute. Their tokens still count as generated.

Diagnostics go to ``metrics.jsonl``, one JSON object per rollout step; dev-subset
Pass@1 is measured every ``evaluation.dev_every`` steps (``null`` in between).

Everything that decides a run's numbers is a pure function of the config, so on CPU an
interrupted-and-resumed run reproduces the uninterrupted one exactly.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time

import torch
from tqdm.auto import tqdm

from . import rundir
from .advantages import group_advantages
from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from .coldstart import get_cold_start, save_pretrained_atomic
from .config import TrainConfig
from .device import resolve_device
from .evaluation import evaluate
from .losses import policy_loss
from .model import load_model_and_tokenizer, response_logprobs
from .rollout import autocast_for, rollout
from .task import make_splits


def _sync(device: torch.device) -> None:
    """Wait for queued CUDA work so that timings land on the right phase."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TrainingDiverged(RuntimeError):
    """A NaN/inf loss or gradient: the run stops, the last good checkpoint stays."""


def learning_rate_at(step: int, total: int, cfg) -> float:
    """LR for optimizer step ``step`` (0-based) of ``total``, per ``lr_scheduler_type``."""
    o = cfg.optimization
    base = o.learning_rate
    warm = o.warmup_steps if o.lr_scheduler_type != "constant" else 0
    if warm and step < warm:
        return base * (step + 1) / warm
    if o.lr_scheduler_type in ("constant", "constant_with_warmup"):
        return base
    progress = min(1.0, (step - warm) / max(1, total - warm))
    if o.lr_scheduler_type == "linear":
        return base * (1.0 - progress)
    return base * 0.5 * (1.0 + math.cos(math.pi * progress))


def splits_for(cfg: TrainConfig):
    t = cfg.task
    return make_splits(
        seed=t.split_seed,
        min_digits=t.min_digits,
        max_digits=t.max_digits,
        num_train=t.num_train,
        num_dev=t.num_dev,
        num_eval=t.num_eval,
    )


def eval_temperature(cfg: TrainConfig) -> float:
    e = cfg.evaluation.eval_temperature
    return cfg.rollout.temperature if e is None else e


def held_out_eval(model, tok, cfg, problems, seed_offset: int = 0) -> dict:
    e = cfg.evaluation
    return evaluate(
        model,
        tok,
        problems,
        num_samples=e.num_samples,
        temperature=eval_temperature(cfg),
        max_completion_length=cfg.rollout.max_completion_length,
        pass_k=e.pass_k,
        greedy=e.greedy,
        seed=cfg.seed * 7919 + seed_offset,
    )


def _kl_to_reference(logp, ref_logp, mask):
    """Per-response mean of the k3 estimator exp(q-p) - (q-p) - 1, then the batch mean."""
    d = torch.where(mask.bool(), ref_logp - logp, torch.zeros_like(logp))
    k3 = (torch.exp(d) - d - 1.0) * mask
    return (k3.sum(-1) / mask.sum(-1).clamp(min=1)).mean()


class Trainer:
    """One run directory: ``config.json``, ``metrics.jsonl``, ``cold_start/``,
    ``checkpoints/``, ``final_model/``, ``summary.json``."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str,
        *,
        resume: bool = False,
        log=print,
        progress: bool | None = None,
        on_step_end=None,
        overwrite: bool = False,
        resume_keys=None,
    ):
        self.cfg, self.run_dir, self.resume, self.log = cfg, run_dir, resume, log
        self.overwrite, self.resume_keys = overwrite, resume_keys  # see rundir.prepare
        self.progress = progress
        self.on_step_end = on_step_end
        self._stop_requested = False

    def request_stop(self) -> None:
        """Finish the current step, checkpoint, and return (what Ctrl-C does)."""
        self._stop_requested = True

    # ------------------------------------------------------------ setup

    def _setup(self):
        run = self.run_dir
        # Folder classification, resume policy, checkpoint verification: see sapo_lab/rundir.py.
        self.prepared = rundir.prepare(
            run, self.cfg, resume=self.resume, overwrite=self.overwrite, resume_keys=self.resume_keys, log=self.log
        )
        self.cfg = cfg = self.prepared.cfg
        ckpt = self.prepared.checkpoint
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = resolve_device(cfg.device)
        self.splits = splits_for(cfg)
        os.makedirs(run, exist_ok=True)
        cold_dir = os.path.join(run, "cold_start")
        if self.resume:
            self.model, self.tok = load_model_and_tokenizer(cold_dir)
            self.model.to(self.device)
            with open(os.path.join(run, "cold_start_eval.json")) as f:
                self.cold_eval = json.load(f)
        else:
            cfg.save(os.path.join(run, "config.json"))
            self.model, self.tok, report = get_cold_start(cfg, self.splits, self.device, log=self.log)
            self.cold_eval = held_out_eval(self.model, self.tok, cfg, self.splits["eval"])
            self.cold_eval["cold_start"] = report
            save_pretrained_atomic(self.model, self.tok, cold_dir)
            with open(os.path.join(run, "cold_start_eval.json"), "w") as f:
                json.dump(self.cold_eval, f, indent=2)
            with open(os.path.join(run, "metrics.jsonl"), "w"):
                pass
        self.model.to(self.device)
        self.reference = None
        if cfg.optimization.beta > 0:
            self.reference, _ = load_model_and_tokenizer(cold_dir)
            self.reference.to(self.device).eval().requires_grad_(False)
        o = cfg.optimization
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=o.learning_rate, betas=(o.adam_beta1, o.adam_beta2), weight_decay=o.weight_decay
        )
        self.generators = {
            "data": torch.Generator().manual_seed(cfg.seed * 3 + 11),
            "shuffle": torch.Generator().manual_seed(cfg.seed * 3 + 12),
            "sample": torch.Generator(device=self.device).manual_seed(cfg.seed * 3 + 13),
        }
        torch.manual_seed(cfg.seed)
        self.step, self.elapsed = 0, 0.0
        self.counters = {"tokens_generated": 0, "tokens_trained": 0, "optimizer_steps": 0, "verifier_calls": 0}
        if self.resume:
            if ckpt is None:
                raise ValueError(f"--resume: {run} has no checkpoint yet")
            state = load_checkpoint(ckpt, self.model, self.opt, self.generators)
            self.step, self.elapsed = state["step"], state["elapsed_s"]
            self.counters = state["counters"]
            self.prepared.commit(self.step)  # tidies the folder, truncates metrics.jsonl, logs "resumed"

    def _truncate_metrics(self, step: int):
        rundir.truncate_metrics(self.run_dir, step, log=self.log)

    def _checkpoint(self):
        save_checkpoint(
            self.run_dir,
            self.step,
            self.model,
            self.opt,
            self.generators,
            {"elapsed_s": self.elapsed, "counters": self.counters, "config": self.cfg.to_dict()},
        )

    # ------------------------------------------------------------ one step

    def train_step(self) -> dict:
        cfg, model, device = self.cfg, self.model, self.device
        r, o, lc = cfg.rollout, cfg.optimization, cfg.loss
        t_start = time.perf_counter()
        train = self.splits["train"]
        idx = torch.randint(len(train), (r.prompts_per_rollout,), generator=self.generators["data"]).tolist()
        try:
            batch = rollout(
                model,
                self.tok,
                [train[i] for i in idx],
                num_generations=r.num_generations,
                max_completion_length=r.max_completion_length,
                temperature=r.temperature,
                generator=self.generators["sample"],
                device=device,
            )
        except FloatingPointError as exc:
            raise TrainingDiverged(f"step {self.step + 1}, sampling: {exc}") from exc
        # Model time: the sampling loop, teacher-forced forwards, backward and optimizer steps.
        # Tokenizing, decoding, verifying, advantages and bookkeeping are the overhead.
        model_s = batch.sample_s
        grouped = batch.grouped_rewards()
        batch.advantages = group_advantages(grouped).reshape(-1)
        if self.reference is not None:
            t0 = time.perf_counter()
            with torch.no_grad(), autocast_for(device):
                batch.ref_logp = response_logprobs(
                    self.reference,
                    batch.input_ids,
                    batch.attention_mask,
                    batch.response_mask,
                    temperature=r.temperature,
                )
            _sync(device)
            model_s += time.perf_counter() - t0
        minibatches = batch.minibatches(o.steps_per_generation, generator=self.generators["shuffle"])
        total_opt = o.max_steps * o.steps_per_generation
        stats_list, grad_norms, losses, kls = [], [], [], []
        eps_high = lc.epsilon if lc.epsilon_high is None else lc.epsilon_high
        max_norm = o.max_grad_norm if o.max_grad_norm > 0 else float("inf")
        model.train()
        skip = o.skip_zero_advantage and self.reference is None
        tokens_trained = 0
        for k, mb in enumerate(minibatches):
            lr = learning_rate_at(self.counters["optimizer_steps"], total_opt, cfg)
            for g in self.opt.param_groups:
                g["lr"] = lr
            scale = 1.0
            if skip:
                keep = mb.advantages != 0
                if lc.aggregation == "per_response":
                    scale = float(keep.sum()) / keep.numel()
                else:
                    cm = mb.completion_mask
                    scale = float(cm[keep].sum()) / float(cm.sum())
                if not bool(keep.any()):
                    self._zero_gradient_step()
                    grad_norms.append(0.0)
                    losses.append(0.0)
                    continue
                mb = mb.select(keep)
            tokens_trained += int(mb.completion_mask.sum())
            t0 = time.perf_counter()
            with autocast_for(device):
                logp = response_logprobs(model, mb.input_ids, mb.attention_mask, mb.response_mask, temperature=r.temperature)
            _sync(device)
            model_s += time.perf_counter() - t0
            mask = mb.completion_mask
            try:
                out = policy_loss(
                    logp,
                    mb.behavior_logp,
                    mb.advantages,
                    mask,
                    loss_type=lc.loss_type,
                    tau_pos=lc.sapo_temperature_pos,
                    tau_neg=lc.sapo_temperature_neg,
                    clip_eps_low=lc.epsilon,
                    clip_eps_high=eps_high,
                    importance_sampling_level=lc.importance_sampling_level,
                    aggregation=lc.aggregation,
                    max_log_ratio=lc.max_log_ratio,
                    max_log_ratio_policy=lc.max_log_ratio_policy,
                )
            except ValueError as exc:
                if "NaN" in str(exc) or "inf" in str(exc):
                    raise TrainingDiverged(f"step {self.step + 1}, minibatch {k}: {exc}") from exc
                raise
            loss = out.loss * scale if scale != 1.0 else out.loss
            if self.reference is not None:
                kl = _kl_to_reference(logp, mb.ref_logp, mask.to(logp.dtype))
                loss = loss + o.beta * kl
                kls.append(float(kl.detach()))
            if not torch.isfinite(loss):
                raise TrainingDiverged(f"step {self.step + 1}, minibatch {k}: loss is {float(loss.detach())}")
            t0 = time.perf_counter()
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
            if not math.isfinite(gn):
                raise TrainingDiverged(f"step {self.step + 1}, minibatch {k}: gradient norm is {gn}")
            self.opt.step()
            _sync(device)
            model_s += time.perf_counter() - t0
            self.counters["optimizer_steps"] += 1
            stats_list.append(out.stats)
            grad_norms.append(gn)
            losses.append(float(loss.detach()))
        self.step += 1
        comp_mask = batch.completion_mask
        n_tokens = int(comp_mask.sum())
        self.counters["tokens_generated"] += n_tokens
        self.counters["tokens_trained"] += tokens_trained
        self.counters["verifier_calls"] += batch.num_responses
        step_s = time.perf_counter() - t_start
        self.elapsed += step_s
        reasons: dict = {}
        for ep in batch.episodes:
            reasons[ep.reason] = reasons.get(ep.reason, 0) + 1
        zero_groups = int((grouped.max(-1).values == grouped.min(-1).values).sum())
        ent = batch.entropy
        row = {
            "step": self.step,
            "reward_mean": float(batch.rewards.mean()),
            "response_length_mean": float(comp_mask.sum(-1).float().mean()),
            "entropy": float((ent * comp_mask).sum() / comp_mask.sum()),
            "loss": sum(losses) / len(losses),
            "grad_norm": sum(grad_norms) / len(grad_norms),
            "grad_norm_max": max(grad_norms),
            "zero_advantage_groups": zero_groups,
            "zero_advantage_group_frac": zero_groups / grouped.shape[0],
            "lr": lr,
            "reasons": reasons,
            "tokens_generated": n_tokens,
            "tokens_trained": tokens_trained,
            **{f"total_{k}": v for k, v in self.counters.items()},
            "step_s": step_s,
            "non_model_frac": max(0.0, step_s - model_s) / step_s,
            "elapsed_s": self.elapsed,
        }
        keys = [
            "approx_kl",
            "ratio_q05",
            "ratio_q50",
            "ratio_q95",
            "coef_q05",
            "coef_q50",
            "coef_q95",
            "signal_removed_frac",
            "clip_frac",
        ]
        for key in keys:
            vals = [s[key] for s in stats_list if key in s and math.isfinite(s[key])]
            if vals:
                row[key] = sum(vals) / len(vals)
            elif key != "clip_frac" or lc.loss_type != "sapo":
                row[key] = None  # every minibatch was all zero-advantage: nothing to measure
        row["ratio_q95_last_minibatch"] = stats_list[-1].get("ratio_q95") if stats_list else None
        row["max_abs_log_ratio"] = max((s.get("max_abs_log_ratio", 0.0) for s in stats_list), default=0.0)
        row["beyond_max_log_ratio"] = sum(s.get("beyond_max_log_ratio", 0) for s in stats_list)
        row["empty_responses"] = sum(s.get("empty_responses", 0) for s in stats_list)
        if kls:
            row["kl_ref"] = sum(kls) / len(kls)
        return row

    def _zero_gradient_step(self) -> None:
        """An optimizer step with an all-zero gradient, exactly what the full minibatch would give.

        AdamW still moves the weights through its momentum and weight decay, so the step
        is taken rather than skipped.
        """
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)
        self.opt.step()
        self.counters["optimizer_steps"] += 1

    def dev_pass1(self) -> float:
        e = self.cfg.evaluation
        res = evaluate(
            self.model,
            self.tok,
            self.splits["dev"][: e.dev_prompts],
            num_samples=1,
            temperature=eval_temperature(self.cfg),
            max_completion_length=self.cfg.rollout.max_completion_length,
            greedy=False,
            seed=self.cfg.seed * 1_000_003 + self.step,
        )
        return res["pass1"]

    # ------------------------------------------------------------ the run

    def train(self) -> dict:
        self._setup()
        cfg = self.cfg
        metrics_path = os.path.join(self.run_dir, "metrics.jsonl")
        status = "completed"
        prev_handler = None
        if hasattr(signal, "SIGINT"):
            try:
                prev_handler = signal.signal(signal.SIGINT, self._on_sigint)
            except ValueError:  # not the main thread
                prev_handler = None
        bar = tqdm(
            total=cfg.optimization.max_steps,
            initial=self.step,
            desc=f"{cfg.loss.loss_type} seed {cfg.seed}",
            disable=None if self.progress is None else not self.progress,
            dynamic_ncols=True,
        )
        last_dev = None
        try:
            while self.step < cfg.optimization.max_steps:
                if self._stop_requested:
                    status = "interrupted"
                    break
                if cfg.max_train_time_s and self.elapsed >= cfg.max_train_time_s:
                    status = "time_limit"
                    break
                row = self.train_step()
                if self.step % cfg.evaluation.dev_every == 0 or self.step == cfg.optimization.max_steps:
                    t0 = time.perf_counter()
                    row["dev_pass1"] = last_dev = self.dev_pass1()
                    row["dev_eval_s"] = time.perf_counter() - t0
                    self.elapsed += row["dev_eval_s"]
                    row["elapsed_s"] = self.elapsed
                else:
                    row["dev_pass1"] = None
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
                bar.update(1)
                dev = f"{last_dev:.2f}" if last_dev is not None else "-"
                bar.set_postfix(reward=f"{row['reward_mean']:.2f}", dev=dev)
                if self.step % cfg.save_steps == 0:
                    self._checkpoint()
                if self.on_step_end is not None:
                    self.on_step_end(self, row)
        except TrainingDiverged as exc:
            bar.close()
            last = latest_checkpoint(self.run_dir)
            raise TrainingDiverged(f"training diverged at {exc}; last good checkpoint: {last or 'none'}") from None
        finally:
            bar.close()
            if prev_handler is not None:
                signal.signal(signal.SIGINT, prev_handler)
        if status == "interrupted":
            self._checkpoint()
            self.log(f"interrupted at step {self.step}; checkpoint saved, continue with --resume")
            return {"status": status, "step": self.step, "run_dir": self.run_dir}
        if status == "time_limit":
            self.log(f"max_train_time_s={cfg.max_train_time_s} reached after {self.step} steps; finishing")
        if self.step % cfg.save_steps != 0:
            self._checkpoint()
        return self._finish(status)

    def _on_sigint(self, signum, frame):
        if self._stop_requested:  # second Ctrl-C: stop now
            raise KeyboardInterrupt
        self._stop_requested = True

    def _finish(self, status: str = "completed") -> dict:
        final_dir = os.path.join(self.run_dir, "final_model")
        save_pretrained_atomic(self.model, self.tok, final_dir)
        final = held_out_eval(self.model, self.tok, self.cfg, self.splits["eval"], seed_offset=1)
        summary = {
            "status": status,
            "loss_type": self.cfg.loss.loss_type,
            "seed": self.cfg.seed,
            "steps": self.step,
            "cold_start_pass1": self.cold_eval["pass1"],
            "cold_start_pass1_ci95": self.cold_eval["pass1_ci95"],
            "final_pass1": final["pass1"],
            "final_pass1_ci95": final["pass1_ci95"],
            "pass1_gain": final["pass1"] - self.cold_eval["pass1"],
            "cold_start_greedy_accuracy": self.cold_eval.get("greedy_accuracy"),
            "final_greedy_accuracy": final.get("greedy_accuracy"),
            "train_wall_s": self.elapsed,
            "counters": self.counters,
            "cold_start_eval": self.cold_eval,
            "final_eval": final,
            "device": str(self.device),
            "config": self.cfg.to_dict(),
        }
        tmp = os.path.join(self.run_dir, "summary.json.tmp")
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=2)
        os.replace(tmp, os.path.join(self.run_dir, "summary.json"))
        return summary


def train(
    cfg: TrainConfig,
    run_dir: str,
    *,
    resume: bool = False,
    log=print,
    progress=None,
    on_step_end=None,
    overwrite: bool = False,
    resume_keys=None,
) -> dict:
    """Run (or resume) a training run; returns the summary dict.

    ``overwrite`` replaces another run's files in ``run_dir``; ``resume_keys`` names the
    config keys the user asked to change on resume (None: compare all of ``cfg``).
    """
    trainer = Trainer(
        cfg,
        run_dir,
        resume=resume,
        log=log,
        progress=progress,
        on_step_end=on_step_end,
        overwrite=overwrite,
        resume_keys=resume_keys,
    )
    return trainer.train()


def remove_run(run_dir: str) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)
