"""The SAPO / GRPO / GSPO training loop (Algorithms 1 and 2 of the review).

Each rollout step (:meth:`Trainer.train_step`):

1. :meth:`Trainer.collect_rollout` draws ``prompts_per_rollout`` training prompts; the
   current model, frozen for the duration of sampling, samples ``num_generations``
   responses per prompt with their behavior log-probs (:mod:`sapo_lab.training.rollout`); the
   reward function (the task's verifier unless another is given) scores them and
   :func:`group_advantages` normalises rewards per group;
2. the responses are shuffled into ``steps_per_generation`` (M) minibatches, and each
   makes one update (:mod:`sapo_lab.training.update`): teacher-forced current log-probs,
   :func:`policy_loss` with the configured ``loss_type``, one backward and one AdamW
   step. Minibatches after the first are therefore trained on data sampled by an older
   policy, as in the paper. On the steps it is asked for, the token- versus
   sequence-level gradient comparison is measured between the loss and the backward;
3. :func:`sapo_lab.training.metrics.metrics_row` turns the batch and the M updates into one row.

Around the loop (:meth:`Trainer.train`): :meth:`Trainer.start` readies the run (:mod:`.lifecycle`: cold
start or resume); after the last step the final model is evaluated and the summary written. One metrics
row per rollout step; dev-subset Pass@1 every ``evaluation.dev_every`` steps (``null`` in between).
Evaluation always uses the task's own verifier, so a shaped ``reward_fn`` cannot inflate Pass@1. Every
number is a pure function of the config (and the reward function): on CPU a resumed run reproduces the
uninterrupted one exactly.
"""

from __future__ import annotations

import os
import time

import torch

from ..errors import NonFiniteError, TrainingDiverged
from ..objective.advantages import group_advantages
from ..runs.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from ..runs.config import TrainConfig
from ..runs.metric_names import DEV_EVAL_S, DEV_PASS1, ELAPSED_S
from ..runs.run_folder import RunFolder
from ..runs.run_policy import prepare
from ..tasks import RewardFn, splits_for, task_for
from .cold_start import cold_start_cache, is_cached
from .console import ctrl_c_requests_stop, progress_bar
from .device import ModelTimer, autocast_for, cpu_fallback_notice, planned_work, resolve_device, say_once
from .evaluation import dev_pass1
from .lifecycle import finish_model, make_optimizer, reference_model, run_summary, start_model
from .metrics import metrics_row
from .model import check_model_folder, response_logprobs
from .rollout import MiniBatch, RolloutBatch, rollout
from .seeds import global_seed, run_generators
from .update import UpdateResult, compare_gradients, comparison_due, learning_rate_at, minibatch_forward, optimizer_step

__all__ = ["Trainer", "TrainingDiverged", "learning_rate_at", "train"]


class Trainer:
    """One run directory (:class:`sapo_lab.runs.run_folder.RunFolder`) and the loop that fills it.

    Constructing it decides what the folder allows (:func:`sapo_lab.runs.run_policy.prepare`) and builds the
    task and its splits; :meth:`start` readies the model (cold start or checkpoint), :meth:`train` runs the loop,
    :meth:`train_step` makes one rollout step. ``reward_fn(completion_text, finished, problem) -> (reward,
    reason)`` replaces the task's verifier for the rollouts' rewards (a resume needs the same one).
    """

    def __init__(self, cfg: TrainConfig, run_dir: str, *, resume: bool = False, reward_fn: RewardFn | None = None,
                 log=print, progress: bool | None = None, on_step_end=None, overwrite: bool = False, resume_keys=None):
        self.run_dir, self.folder, self.resume, self.log = run_dir, RunFolder(run_dir), resume, log
        self.progress, self.on_step_end = progress, on_step_end
        self.stop_requested, self.started = False, False
        self.prepared = prepare(run_dir, cfg, resume=resume, overwrite=overwrite, resume_keys=resume_keys, log=log)
        self.cfg = cfg = self.prepared.cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = resolve_device(cfg.device)
        self.task = task_for(cfg)
        self.reward_fn = self.task.verify if reward_fn is None else reward_fn
        self.splits = splits_for(cfg, self.task)
        if os.path.isdir(cfg.model.name_or_path):  # a broken model folder is refused before the device line
            check_model_folder(cfg.model.name_or_path)
        self._say_where_it_runs()

    def _say_where_it_runs(self) -> None:
        """``device auto`` without a GPU: one line naming the CPU and the run's cost there, before any work."""
        if self.cfg.device != "auto" or self.device.type != "cpu":
            return
        cached = is_cached(cold_start_cache(self.cfg))
        work = planned_work(self.cfg, self.task, self.splits, cold_start_cached=cached, resume=self.resume)
        say_once(self.log, cpu_fallback_notice(self.cfg.device, self.device, work))

    def request_stop(self) -> None:
        """Finish the current step, checkpoint, and return (what Ctrl-C does)."""
        self.stop_requested = True

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Trainer:
        """Ready the run once: model (cold start, or the saved one), KL reference, AdamW, generators, checkpoint."""
        if self.started:
            return self
        self.started = True
        cfg = self.cfg
        os.makedirs(self.run_dir, exist_ok=True)
        with torch.enable_grad():  # the cold start trains even when start() is called inside a no_grad block
            self.model, self.tok, self.cold_eval = start_model(
                cfg, self.folder, self.splits, self.task, self.device, resume=self.resume, log=self.log
            )
        self.reference = reference_model(cfg, self.folder, self.device)
        self.opt = make_optimizer(self.model, cfg.optimization)
        self.generators = run_generators(cfg.seed, self.device)
        torch.manual_seed(global_seed(cfg.seed))
        self.step, self.elapsed = 0, 0.0
        self.counters = {"tokens_generated": 0, "tokens_trained": 0, "optimizer_steps": 0, "verifier_calls": 0}
        if self.resume:
            self._restore()
        return self

    def _restore(self) -> None:
        """Load the checkpoint ``prepare`` chose (it refuses a resume without one) and tidy the folder."""
        state = load_checkpoint(self.prepared.checkpoint, self.model, self.opt, self.generators)
        self.step, self.elapsed, self.counters = state["step"], state["elapsed_s"], state["counters"]
        self.prepared.commit(self.step)  # tidies the folder, truncates metrics.jsonl, logs "resumed"

    def _checkpoint(self) -> None:
        state = {"elapsed_s": self.elapsed, "counters": self.counters, "config": self.cfg.to_dict()}
        save_checkpoint(self.run_dir, self.step, self.model, self.opt, self.generators, state)

    def _end(self, status: str) -> dict:
        """After the loop: a checkpoint, then (unless interrupted) the final model's evaluation and ``summary.json``."""
        if status == "interrupted":
            self._checkpoint()
            self.log(f"interrupted at step {self.step}; checkpoint saved, continue with --resume")
            return {"status": status, "step": self.step, "run_dir": self.run_dir}
        if status == "time_limit":
            self.log(f"max_train_time_s={self.cfg.max_train_time_s} reached after {self.step} steps; finishing")
        if self.step % self.cfg.save_steps != 0:
            self._checkpoint()
        final = finish_model(self.model, self.tok, self.cfg, self.folder, self.splits["eval"], self.task.verify)
        summary = run_summary(self.cfg, status, cold=self.cold_eval, final=final, steps=self.step, elapsed=self.elapsed,
                              counters=self.counters, device=self.device)
        self.folder.write_summary(summary)
        return summary

    # ------------------------------------------------------------ the loop

    def train(self) -> dict:
        """Run rollout steps until ``max_steps``, the time limit or a stop request; returns the summary."""
        self.start()
        bar = dict(total=self.cfg.optimization.max_steps, initial=self.step, enabled=self.progress,
                   desc=f"{self.cfg.loss.loss_type} seed {self.cfg.seed}", log=self.log)
        with ctrl_c_requests_stop(self), progress_bar(**bar) as shown:
            status = self._loop(shown)
        return self._end(status)

    def _loop(self, bar) -> str:
        """Step, log the row, then the cadence work (dev Pass@1, checkpoint, callback); returns why it stopped."""
        try:
            while self.step < self.cfg.optimization.max_steps:
                stopping = self._stop_status()
                if stopping:
                    return stopping
                row = self.train_step()
                self._dev_eval_if_due(row)
                self.folder.append_metrics(row)
                bar.show(row)
                if self.step % self.cfg.save_steps == 0:
                    self._checkpoint()
                if self.on_step_end is not None:
                    self.on_step_end(self, row)
        except TrainingDiverged as exc:
            last = latest_checkpoint(self.run_dir)
            raise TrainingDiverged(f"training diverged at {exc}; last good checkpoint: {last or 'none'}") from None
        return "completed"

    def _stop_status(self) -> str | None:
        if self.stop_requested:
            return "interrupted"
        if self.cfg.max_train_time_s and self.elapsed >= self.cfg.max_train_time_s:
            return "time_limit"
        return None

    def _dev_eval_if_due(self, row: dict) -> None:
        """Dev Pass@1 every ``dev_every`` steps and at the last step (``None`` between); it counts as training time."""
        cfg = self.cfg
        if self.step % cfg.evaluation.dev_every != 0 and self.step != cfg.optimization.max_steps:
            row[DEV_PASS1] = None
            return
        t0 = time.perf_counter()
        row[DEV_PASS1] = dev_pass1(self.model, self.tok, cfg, self.splits["dev"], self.task.verify, self.step)
        row[DEV_EVAL_S] = time.perf_counter() - t0
        self.elapsed += row[DEV_EVAL_S]
        row[ELAPSED_S] = self.elapsed

    # ------------------------------------------------------------ one step

    def train_step(self) -> dict:
        """One rollout step: collect a rollout and its advantages, make M minibatch updates, return the metrics row."""
        self.start()
        t_start = time.perf_counter()
        timer = ModelTimer(self.device)  # model work; the rest of the step is bookkeeping
        batch = self.collect_rollout(timer)
        minibatches = batch.minibatches(self.cfg.optimization.steps_per_generation, generator=self.generators["shuffle"])
        updates = [self._update(k, mb, timer) for k, mb in enumerate(minibatches)]
        return self._step_row(batch, updates, timer, t_start)

    def collect_rollout(self, timer: ModelTimer) -> RolloutBatch:
        """Sample and score one rollout batch, set its group advantages (and reference log-probs with beta > 0)."""
        batch = self._sample_rollout(timer)
        batch.advantages = group_advantages(batch.grouped_rewards()).reshape(-1)
        if self.reference is not None:
            with timer, torch.no_grad(), autocast_for(self.device):
                batch.ref_logp = response_logprobs(self.reference, batch.input_ids, batch.attention_mask,
                                                   batch.response_mask, temperature=self.cfg.rollout.temperature)
        return batch

    def _sample_rollout(self, timer: ModelTimer) -> RolloutBatch:
        r, train = self.cfg.rollout, self.splits["train"]
        idx = torch.randint(len(train), (r.prompts_per_rollout,), generator=self.generators["data"]).tolist()
        try:
            batch = rollout(self.model, self.tok, [train[i] for i in idx], reward_fn=self.reward_fn,
                            num_generations=r.num_generations, max_completion_length=r.max_completion_length,
                            temperature=r.temperature, generator=self.generators["sample"], device=self.device)
        except NonFiniteError as exc:
            raise TrainingDiverged(f"step {self.step + 1}, sampling: {exc}") from exc
        timer.seconds += batch.sample_s
        return batch

    def _update(self, k: int, mb: MiniBatch, timer: ModelTimer) -> UpdateResult:
        """Minibatch k: forward and loss, the gradient comparison when due, then backward and one AdamW step."""
        cfg, o = self.cfg, self.cfg.optimization
        where = f"step {self.step + 1}, minibatch {k}"
        forward = minibatch_forward(self.model, mb, cfg, timer=timer, where=where)
        due = comparison_due(self.step + 1, k, cfg)
        comparison, comparison_s = compare_gradients(self.model, forward, cfg.loss) if due else (None, 0.0)
        lr = learning_rate_at(self.counters["optimizer_steps"], o.max_steps * o.steps_per_generation, cfg)
        update = optimizer_step(self.model, self.opt, forward, cfg, lr=lr, timer=timer, where=where)
        update.gradient_comparison, update.comparison_s = comparison, comparison_s
        self.counters["optimizer_steps"] += 1
        return update

    def _step_row(self, batch: RolloutBatch, updates: list[UpdateResult], timer: ModelTimer, t_start: float) -> dict:
        """Count the finished step and build its metrics row."""
        self.step += 1
        self.counters["tokens_generated"] += int(batch.completion_mask.sum())
        self.counters["tokens_trained"] += sum(u.tokens_trained for u in updates)
        self.counters["verifier_calls"] += batch.num_responses
        step_s = time.perf_counter() - t_start
        self.elapsed += step_s
        lc = self.cfg.loss
        return metrics_row(self.step, batch, updates, lr=updates[-1].lr, loss_type=lc.loss_type,
                           tau_pos=lc.sapo_temperature_pos, tau_neg=lc.sapo_temperature_neg, counters=self.counters,
                           step_s=step_s, model_s=timer.seconds, elapsed_s=self.elapsed)


def train(cfg: TrainConfig, run_dir: str, *, resume: bool = False, reward_fn: RewardFn | None = None, log=print,
          progress=None, on_step_end=None, overwrite: bool = False, resume_keys=None) -> dict:
    """Run (or resume) a training run; returns the summary dict (see :class:`Trainer`).

    ``overwrite`` replaces another run's files in ``run_dir``; ``resume_keys`` names the
    config keys the user asked to change on resume (None: compare all of ``cfg``).
    """
    return Trainer(cfg, run_dir, resume=resume, reward_fn=reward_fn, log=log, progress=progress,
                   on_step_end=on_step_end, overwrite=overwrite, resume_keys=resume_keys).train()
