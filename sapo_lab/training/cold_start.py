"""Cold start: a short supervised warm start, stopped while the model is still far from perfect.

Like the paper's cold-start checkpoint, it gives RL a policy that already follows the
answer format and is right some of the time. Training stops as soon as sampled dev
Pass@1 reaches ``target_pass1`` (checked every ``eval_every`` updates), so the
starting point is "competent, not solved" whatever the model size.

The result is saved with ``save_pretrained`` and cached under a hash of everything
that determines it, so every loss type and rerun with the same seed starts from the
identical checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

import torch
import torch.nn.functional as F

from ..runs.durable import TMP_SUFFIX, move, write_json
from ..runs.identity import run_identity
from ..runs.kernels import current_kernel_setting
from ..runs.manifest import write_manifest
from ..tasks import Task, task_for
from .console import PaceReport
from .device import autocast_for
from .evaluation import evaluate
from .model import load_model_and_tokenizer, position_ids_from_mask
from .seeds import cold_start_batch_seed, cold_start_dev_eval_seed, model_init_seed


def cold_start_key(cfg) -> str:
    """A hash of everything that decides the cold start: model, task name and options, splits, settings, seed."""
    spec = {
        "model": cfg.model.name_or_path,
        "task": vars(cfg.task),
        "cold_start": run_identity(cfg.to_dict())["cold_start"],
        "seed": cfg.seed,
        "max_completion_length": cfg.rollout.max_completion_length,
        "temperature": cfg.rollout.temperature,
        "version": 4,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def sft_batch(tokenizer, problems, device):
    """Prompt + answer + EOS, left padded; the loss mask covers the answer and EOS only."""
    prompts = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
    answers = tokenizer([p.answer for p in problems], add_special_tokens=False)["input_ids"]
    seqs = [a + b + [tokenizer.eos_token_id] for a, b in zip(prompts, answers, strict=True)]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    loss_mask = torch.zeros_like(ids)
    for i, (s, p) in enumerate(zip(seqs, prompts, strict=True)):
        ids[i, width - len(s) :] = torch.tensor(s)
        attn[i, width - len(s) :] = 1
        loss_mask[i, width - len(s) + len(p) :] = 1
    return ids.to(device), attn.to(device), loss_mask.to(device)


def train_cold_start(model, tokenizer, splits, cfg, device, log=print, task: Task | None = None,
                     progress=None) -> dict:
    """Supervised updates until dev Pass@1 (by the task's verifier) >= target or ``max_updates``. Returns a report.

    ``progress(update, loss)`` is called after every update (``loss`` a tensor, read only when shown); by
    default a :class:`~sapo_lab.training.console.PaceReport` that writes to ``log`` once the pace is known.
    """
    task = task_for(cfg) if task is None else task
    cs = cfg.cold_start
    if progress is None:
        progress = PaceReport(log, total=cs.max_updates, what="cold start: update")
    log(f"cold start: up to {cs.max_updates} updates of {cs.batch_size} examples, to dev pass@1 "
        f"{cs.target_pass1} (checked every {cs.eval_every})")
    gen = torch.Generator().manual_seed(cold_start_batch_seed(cfg.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=cs.sft_learning_rate, weight_decay=0.0)
    train = splits["train"]
    dev = splits["dev"]
    t0 = time.perf_counter()
    report = {"updates": 0, "dev_pass1": None}
    temperature = cfg.rollout.temperature
    for step in range(1, cs.max_updates + 1):
        idx = torch.randint(len(train), (cs.batch_size,), generator=gen).tolist()
        ids, attn, lmask = sft_batch(tokenizer, [train[i] for i in idx], device)
        model.train()
        with autocast_for(device):
            logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn)).logits
        logp = F.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        m = lmask[:, 1:].float()
        loss = -(logp * m).sum() / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        report["updates"] = step
        progress(step, loss.detach())
        if step % cs.eval_every == 0 or step == cs.max_updates:
            res = evaluate(
                model,
                tokenizer,
                dev,
                reward_fn=task.verify,
                num_samples=1,
                temperature=temperature,
                max_completion_length=cfg.rollout.max_completion_length,
                greedy=False,
                seed=cold_start_dev_eval_seed(step),
            )
            report["dev_pass1"] = res["pass1"]
            log(f"cold start: update {step}, sft loss {loss.item():.3f}, dev pass@1 {res['pass1']:.3f}")
            if res["pass1"] >= cs.target_pass1:
                break
    report["wall_s"] = time.perf_counter() - t0
    model.eval()
    return report


def _kernel_subfolder() -> tuple[str, ...]:
    """Cold starts trained under a non-native kernel setting (``sapo_lab.studies.environment.KERNEL_SETTINGS``)
    are other weights: they are cached apart, so that one setting never loads another's."""
    setting = current_kernel_setting()
    return () if setting == "native" else (f"kernels-{setting or 'mixed'}",)


def cold_start_cache(cfg, key: str | None = None) -> str:
    """The folder ``cfg``'s cold start is cached in (``""`` when the cache is off)."""
    if not cfg.cold_start.cache_dir:
        return ""
    return os.path.join(cfg.cold_start.cache_dir, *_kernel_subfolder(), key or cold_start_key(cfg))


def is_cached(cache: str) -> bool:
    """Whether a finished cold start is saved in ``cache`` (its report is written last)."""
    return bool(cache) and os.path.isfile(os.path.join(cache, "cold_start.json"))


def get_cold_start(cfg, splits, device, log=print, task: Task | None = None):
    """(model, tokenizer, report): the cached cold start for ``cfg``, trained if missing.

    A model named by size gets a character tokenizer built from the task's alphabet.
    """
    task = task_for(cfg) if task is None else task
    key = cold_start_key(cfg)
    cache = cold_start_cache(cfg, key)
    if is_cached(cache):
        model, tok = load_model_and_tokenizer(cache)
        with open(os.path.join(cache, "cold_start.json")) as f:
            report = json.load(f)
        report["cached"] = True
        return model.to(device), tok, report
    model, tok = load_model_and_tokenizer(cfg.model.name_or_path, seed=model_init_seed(cfg.seed), alphabet=task.alphabet)
    model.to(device)
    if cfg.cold_start.max_updates > 0:
        report = train_cold_start(model, tok, splits, cfg, device, log=log, task=task)
    else:
        report = {"updates": 0, "dev_pass1": None, "wall_s": 0.0}
    report["key"] = key
    if cache:
        save_pretrained_atomic(model, tok, cache, extra={"cold_start.json": report})
    report["cached"] = False
    return model, tok, report


def save_pretrained_atomic(model, tokenizer, directory: str, extra: dict | None = None) -> None:
    """``save_pretrained`` into a temporary directory with a manifest, then rename it into place (fsynced)."""
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    tmp = f"{directory}{TMP_SUFFIX}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    for name, obj in (extra or {}).items():
        write_json(os.path.join(tmp, name), obj)
    write_manifest(tmp)  # sizes + SHA-256, fsynced: resume verifies the folder before loading it
    if os.path.isdir(directory):
        old = f"{directory}.old-{os.getpid()}"
        move(directory, old)
        move(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)
    else:
        move(tmp, directory)
