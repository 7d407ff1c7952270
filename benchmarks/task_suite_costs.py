"""What a task-suite run costs on this machine: the numbers behind experiments/staleness_long.json.

Two measurements at cpu-tiny size, one torch thread:

* ``step``: one rollout step's model work (sample 32 prompts x 8 responses, then K=4
  teacher-forced forward/backward/AdamW minibatches) for ``addition`` and for the
  long-output ``scratchpad_addition``; prints seconds per phase, three repetitions.
* ``sft``: the cold start's supervised loop (same batch, learning rate and loss as
  :mod:`sapo_lab.training.cold_start`) on ``scratchpad_addition``, with sampled dev Pass@1 every
  100 updates, until it reaches 0.3.

    .venv/bin/python benchmarks/task_suite_costs.py step
    .venv/bin/python benchmarks/task_suite_costs.py sft

Not part of the test suite; on a shared machine the times vary with its load.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from sapo_lab.studies.per_family import score_problems
from sapo_lab.tasks import AdditionTask
from sapo_lab.tasks.suite import ScratchpadAddition
from sapo_lab.training.cold_start import sft_batch
from sapo_lab.training.model import build_model, position_ids_from_mask, response_logprobs
from sapo_lab.training.rollout import encode_prompts, sample
from sapo_lab.training.tokenizer import build_char_tokenizer


def step_cost(task, repeats: int = 3) -> None:
    """Time sampling and a K=4 update on 32 x 8 responses of ``task``."""
    tok = build_char_tokenizer(task.alphabet)
    model = build_model("cpu-tiny", vocab_size=len(tok), seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    problems = task.make_splits(0, 256, 8, 8)["train"][:32]
    prompts = [p.prompt for p in problems for _ in range(8)]
    for _ in range(repeats):
        t0 = time.perf_counter()
        ids, mask = encode_prompts(tok, prompts, "cpu")
        comp, cmask, _, _, _ = sample(
            model,
            ids,
            mask,
            max_new_tokens=task.max_answer_length + 1,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            temperature=1.0,
        )
        t1 = time.perf_counter()
        full, attn = torch.cat([ids, comp], 1), torch.cat([mask, cmask], 1)
        resp = torch.cat([torch.zeros_like(mask), cmask], 1)
        for k in range(4):
            rows = slice(k * 64, (k + 1) * 64)
            logp = response_logprobs(model, full[rows], attn[rows], resp[rows], temperature=1.0)
            loss = -(logp * cmask[rows]).sum() / cmask[rows].sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        t2 = time.perf_counter()
        length = float(cmask.sum(1).float().mean())
        print(f"{task.name}: {length:.1f} response tokens, sample {t1 - t0:.2f} s, K=4 update {t2 - t1:.2f} s")


def sft_cost(max_updates: int = 2000) -> None:
    """Supervised warm start on scratchpad_addition until sampled dev Pass@1 >= 0.3."""
    task = ScratchpadAddition()
    tok = build_char_tokenizer(task.alphabet)
    model = build_model("cpu-tiny", vocab_size=len(tok), seed=0)
    splits = task.make_splits(0, 8000, 256, 512)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    for step in range(1, max_updates + 1):
        idx = torch.randint(len(splits["train"]), (64,), generator=gen).tolist()
        ids, attn, lmask = sft_batch(tok, [splits["train"][i] for i in idx], "cpu")
        model.train()
        logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn)).logits
        logp = F.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        m = lmask[:, 1:].float()
        loss = -(logp * m).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            model.eval()
            recs = score_problems(
                model, tok, task, splits["dev"][:128], num_samples=1, temperature=1.0, max_completion_length=23, seed=step
            )
            pass1 = sum(r.rate for r in recs) / len(recs)
            print(f"update {step}: sft loss {loss.item():.3f}, dev Pass@1 {pass1:.3f}, {time.perf_counter() - t0:.0f} s")
            if pass1 >= 0.3:
                break


def main() -> int:
    """``step`` or ``sft`` (see the module docstring)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "step":
        for task in (AdditionTask(), ScratchpadAddition()):
            step_cost(task)
    elif what == "sft":
        sft_cost()
    else:
        print("usage: task_suite_costs.py step|sft", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
