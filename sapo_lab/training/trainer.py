"""The SAPO / GRPO / GSPO training loop (Algorithms 1 and 2 of the review).

Each rollout step (:meth:`Trainer.train_step`):

1. :meth:`Trainer.collect_rollout` draws ``prompts_per_rollout`` training prompts; the
   current model, frozen for the duration of sampling, samples ``num_generations``
   responses per prompt with their behavior log-probs (:mod:`sapo_lab.training.rollout`); the
   reward function (the task's verifier unless another is given) scores them and
   :func:`group_advantages` normalises rewards per group;
2. the responses are shuffled into ``steps_per_generation`` (K) minibatches, and each
   makes one :func:`sapo_lab.training.update.minibatch_update`: teacher-forced current
   log-probs, :func:`policy_loss` with the configured ``loss_type``, one backward and
   one AdamW step. Minibatches after the first are therefore trained on data sampled by
   an older policy, as in the paper;
3. :func:`sapo_lab.training.metrics.metrics_row` turns the batch and the K updates into one row.

Diagnostics go to ``metrics.jsonl``, one JSON object per rollout step; dev-subset
Pass@1 is measured every ``evaluation.dev_every`` steps (``null`` in between).
Evaluation (cold start, dev, held out) always uses the task's own verifier, so a
shaped ``reward_fn`` cannot inflate Pass@1.

Everything that decides a run's numbers is a pure function of the config (and the
reward function), so on CPU an interrupted-and-resumed run reproduces the
uninterrupted one exactly.
"""

from __future__ import annotations

import json
import os
import signal
import time

import torch
from tqdm.auto import tqdm

from ..errors import NonFiniteError, TrainingDiverged
from ..objective.advantages import group_advantages
from ..tasks import RewardFn, splits_for, task_for
from . import run_folder as rundir
from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from .cold_start import get_cold_start, save_pretrained_atomic
from .config import TrainConfig
from .device import ModelTimer, autocast_for, resolve_device
from .evaluation import dev_pass1, held_out_eval
from .metrics import metrics_row
from .model import load_model_and_tokenizer, response_logprobs
from .rollout import RolloutBatch, rollout
from .update import learning_rate_at, minibatch_update

__all__ = ["Trainer", "TrainingDiverged", "learning_rate_at", "train"]


class Trainer:
    """One run directory: ``config.json``, ``metrics.jsonl``, ``cold_start/``,
    ``checkpoints/``, ``final_model/``, ``summary.json``.

    Constructing a Trainer prepares everything (run directory, task and splits, cold
    start or resumed checkpoint, optimizer, generators); :meth:`train` runs the loop and
    :meth:`train_step` one rollout step. ``reward_fn(completion_text, finished, problem)
    -> (reward, reason)`` replaces the task's verifier for the rollouts' rewards; a
    resumed run needs the same one to reproduce.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str,
        *,
        resume: bool = False,
        reward_fn: RewardFn | None = None,
        log=print,
        progress: bool | None = None,
        on_step_end=None,
        overwrite: bool = False,
        resume_keys=None,
    ):
        self.run_dir, self.resume, self.log = run_dir, resume, log
        self.overwrite, self.resume_keys = overwrite, resume_keys  # see rundir.prepare
        self.progress, self.on_step_end = progress, on_step_end
        self._stop_requested = False
        self.cfg = cfg = self._run_config(cfg)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = resolve_device(cfg.device)
        self.task = task_for(cfg)
        self.reward_fn = self.task.verify if reward_fn is None else reward_fn
        self.splits = splits_for(cfg, self.task)
        os.makedirs(run_dir, exist_ok=True)
        self.model, self.tok, self.cold_eval = self._start_model()
        self.reference = self._reference_model()
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
        if resume:
            self._restore()

    def request_stop(self) -> None:
        """Finish the current step, checkpoint, and return (what Ctrl-C does)."""
        self._stop_requested = True

    # ------------------------------------------------------------ construction

    def _run_config(self, cfg: TrainConfig) -> TrainConfig:
        """The config to run: folder classification, resume policy and checkpoint verification (training/run_folder.py)."""
        self.prepared = rundir.prepare(
            self.run_dir, cfg, resume=self.resume, overwrite=self.overwrite, resume_keys=self.resume_keys, log=self.log
        )
        return self.prepared.cfg

    def _start_model(self):
        """(model, tokenizer, cold-start report): the run's saved cold start, or a new one saved with the run."""
        cfg, run = self.cfg, self.run_dir
        cold_dir = os.path.join(run, "cold_start")
        if self.resume:
            model, tok = load_model_and_tokenizer(cold_dir)
            with open(os.path.join(run, "cold_start_eval.json")) as f:
                cold_eval = json.load(f)
        else:
            cfg.save(os.path.join(run, "config.json"))
            model, tok, report = get_cold_start(cfg, self.splits, self.device, log=self.log, task=self.task)
            cold_eval = held_out_eval(model, tok, cfg, self.splits["eval"], self.task.verify)
            cold_eval["cold_start"] = report
            save_pretrained_atomic(model, tok, cold_dir)
            with open(os.path.join(run, "cold_start_eval.json"), "w") as f:
                json.dump(cold_eval, f, indent=2)
            with open(os.path.join(run, "metrics.jsonl"), "w"):
                pass
        return model.to(self.device), tok, cold_eval

    def _reference_model(self):
        """The frozen cold-start model for the KL penalty, or None when ``beta == 0``."""
        if self.cfg.optimization.beta == 0:
            return None
        reference, _ = load_model_and_tokenizer(os.path.join(self.run_dir, "cold_start"))
        return reference.to(self.device).eval().requires_grad_(False)

    def _restore(self) -> None:
        """Load the latest checkpoint into the model, optimizer and generators; drop later metrics rows."""
        ckpt = self.prepared.checkpoint
        if ckpt is None:
            raise ValueError(f"--resume: {self.run_dir} has no checkpoint yet")
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

    def collect_rollout(self, timer: ModelTimer) -> RolloutBatch:
        """Sample and score one rollout batch, set its group advantages (and reference log-probs with beta > 0)."""
        r = self.cfg.rollout
        train = self.splits["train"]
        idx = torch.randint(len(train), (r.prompts_per_rollout,), generator=self.generators["data"]).tolist()
        try:
            batch = rollout(
                self.model,
                self.tok,
                [train[i] for i in idx],
                reward_fn=self.reward_fn,
                num_generations=r.num_generations,
                max_completion_length=r.max_completion_length,
                temperature=r.temperature,
                generator=self.generators["sample"],
                device=self.device,
            )
        except NonFiniteError as exc:
            raise TrainingDiverged(f"step {self.step + 1}, sampling: {exc}") from exc
        timer.seconds += batch.sample_s
        batch.advantages = group_advantages(batch.grouped_rewards()).reshape(-1)
        if self.reference is not None:
            with timer, torch.no_grad(), autocast_for(self.device):
                batch.ref_logp = response_logprobs(
                    self.reference, batch.input_ids, batch.attention_mask, batch.response_mask, temperature=r.temperature
                )
        return batch

    def train_step(self) -> dict:
        """One rollout step: collect a rollout, make K minibatch updates, return the metrics row."""
        t_start = time.perf_counter()
        cfg, o = self.cfg, self.cfg.optimization
        timer = ModelTimer(self.device)  # model work; the rest of the step is bookkeeping
        batch = self.collect_rollout(timer)
        updates = []
        every = cfg.evaluation.gradient_comparison_every
        compare_this_step = every > 0 and (self.step + 1) % every == 0
        for k, mb in enumerate(batch.minibatches(o.steps_per_generation, generator=self.generators["shuffle"])):
            lr = learning_rate_at(self.counters["optimizer_steps"], o.max_steps * o.steps_per_generation, cfg)
            where = f"step {self.step + 1}, minibatch {k}"
            # The last minibatch is the stalest (K - 1 optimizer steps old): the one where
            # token- and sequence-level gradients can differ at all (at r = 1 they coincide).
            compare = compare_this_step and k == o.steps_per_generation - 1
            updates.append(minibatch_update(self.model, self.opt, mb, cfg, lr=lr, timer=timer, where=where,
                                            compare_gradients=compare))
            self.counters["optimizer_steps"] += 1
        self.step += 1
        self.counters["tokens_generated"] += int(batch.completion_mask.sum())
        self.counters["tokens_trained"] += sum(u.tokens_trained for u in updates)
        self.counters["verifier_calls"] += batch.num_responses
        step_s = time.perf_counter() - t_start
        self.elapsed += step_s
        return metrics_row(
            self.step,
            batch,
            updates,
            lr=lr,
            loss_type=cfg.loss.loss_type,
            tau_pos=cfg.loss.sapo_temperature_pos,
            tau_neg=cfg.loss.sapo_temperature_neg,
            counters=self.counters,
            step_s=step_s,
            model_s=timer.seconds,
            elapsed_s=self.elapsed,
        )

    # ------------------------------------------------------------ the run

    def train(self) -> dict:
        """Run rollout steps until ``max_steps``, the time limit or a stop request; returns the summary."""
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
                    row["dev_pass1"] = last_dev = dev_pass1(
                        self.model, self.tok, cfg, self.splits["dev"], self.task.verify, self.step
                    )
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
        """Save the final model, evaluate it on the held-out split and write ``summary.json``."""
        final_dir = os.path.join(self.run_dir, "final_model")
        save_pretrained_atomic(self.model, self.tok, final_dir)
        final = held_out_eval(self.model, self.tok, self.cfg, self.splits["eval"], self.task.verify, seed_offset=1)
        summary = {
            "status": status,
            "loss_type": self.cfg.loss.loss_type,
            "task": self.cfg.task.name,
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
    reward_fn: RewardFn | None = None,
    log=print,
    progress=None,
    on_step_end=None,
    overwrite: bool = False,
    resume_keys=None,
) -> dict:
    """Run (or resume) a training run; returns the summary dict (see :class:`Trainer`).

    ``overwrite`` replaces another run's files in ``run_dir``; ``resume_keys`` names the
    config keys the user asked to change on resume (None: compare all of ``cfg``).
    """
    trainer = Trainer(
        cfg, run_dir, resume=resume, reward_fn=reward_fn, log=log, progress=progress, on_step_end=on_step_end,
        overwrite=overwrite, resume_keys=resume_keys,
    )
    return trainer.train()
