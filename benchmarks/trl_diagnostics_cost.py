"""Cost of sapo_lab's SAPO gate statistics in TRL (``integrations/trl_diagnostics.py``) per loss call.

Builds two TRL 1.16 ``GRPOTrainer``s on one GPT-2 (``--size``, float32, CPU, 1 torch thread), TRL's own
and the diagnostics subclass, and times ``_compute_loss`` + backward on one off-policy minibatch (old
log-probs shifted so r != 1) of ``--batch`` responses x ``--tokens`` tokens, the two interleaved in
alternating order (the overhead is the median of the paired differences), and ``gate_statistics`` alone.
Prints median milliseconds and the overhead. Needs the TRL environment:

    PYTHONPATH=$PWD benchmarks/.venv-trl/bin/python benchmarks/trl_diagnostics_cost.py [--size cpu-tiny]

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="cpu-tiny")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import trl

    from sapo_lab.integrations.trl import reward_function, to_dataset, to_grpo_config
    from sapo_lab.integrations.trl_diagnostics import gate_statistics, sapo_diagnostics_trainer
    from sapo_lab.runs.config import load_config
    from sapo_lab.tasks import splits_for
    from sapo_lab.training.model import build_model
    from sapo_lab.training.tokenizer import build_char_tokenizer

    cfg = load_config("cpu-tiny", {"loss.loss_type": "sapo"})
    tok = build_char_tokenizer()
    model = build_model(args.size, seed=0, vocab_size=len(tok))
    out = tempfile.mkdtemp()
    trainers = {}
    for name, cls in (("TRL", trl.GRPOTrainer), ("TRL + sapo/ diagnostics", sapo_diagnostics_trainer())):
        grpo_args = to_grpo_config(cfg, output_dir=out, use_cpu=True, bf16=False, fp16=False)
        t = cls(model=copy.deepcopy(model), reward_funcs=reward_function(eos_token_ids=[tok.eos_token_id]),
                args=grpo_args, train_dataset=to_dataset(splits_for(cfg)["train"][:16]), processing_class=tok)
        t.current_gradient_accumulation_steps = 1
        t.model.train()
        trainers[name] = t
    gen = torch.Generator().manual_seed(0)
    prompt_len = 8
    prompt_ids = torch.randint(3, len(tok), (args.batch, prompt_len), generator=gen)
    completion_ids = torch.randint(3, len(tok), (args.batch, args.tokens), generator=gen)
    lengths = torch.randint(1, args.tokens + 1, (args.batch,), generator=gen)
    mask = (torch.arange(args.tokens)[None, :] < lengths[:, None]).long()
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
              "completion_mask": mask, "advantages": torch.randn(args.batch, generator=gen)}
    with torch.no_grad():
        ids = torch.cat([prompt_ids, completion_ids], 1)
        logp = trainers["TRL"]._get_per_token_logps_and_entropies(trainers["TRL"].model, ids,
                                                                  torch.ones_like(ids), args.tokens)[0]
    inputs["old_per_token_logps"] = logp + 0.3 * torch.randn(logp.shape, generator=gen)

    times = {name: [] for name in trainers}
    for i in range(args.repeats):
        for name, t in (list(trainers.items()) if i % 2 == 0 else list(trainers.items())[::-1]):  # alternate order
            t.model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            t._compute_loss(t.model, dict(inputs)).backward()
            times[name].append(time.perf_counter() - start)
    alone = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        gate_statistics(logp, inputs["old_per_token_logps"], inputs["advantages"], mask, tau_pos=1.0, tau_neg=1.05)
        alone.append(time.perf_counter() - start)
    plain, wrapped = (times[n] for n in trainers)
    paired = statistics.median(w - p for p, w in zip(plain, wrapped, strict=True))
    print(f"{args.size}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {args.batch} responses x "
          f"{args.tokens} tokens, {args.repeats} repeats, torch {torch.__version__}, TRL {trl.__version__}, 1 thread")
    print("| what | median ms |\n|---|---|")
    for name in trainers:
        print(f"| _compute_loss + backward, {name} | {1e3 * statistics.median(times[name]):.2f} |")
    print(f"| gate_statistics alone | {1e3 * statistics.median(alone):.2f} |")
    print(f"overhead: {1e3 * paired:+.2f} ms a call, {100 * paired / statistics.median(plain):+.1f}% (median paired "
          f"difference); the statistics alone: {100 * statistics.median(alone) / statistics.median(plain):.2f}%")


if __name__ == "__main__":
    main()
