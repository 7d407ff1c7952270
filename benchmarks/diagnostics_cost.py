"""Cost of sapo_lab.objective.diagnostics per call on the cpu-tiny model, next to one update's forward + backward.

Builds the ``cpu-tiny`` GPT-2 (1 torch thread, as the preset), samples one rollout batch of the
preset's shape (32 prompts x G = 8, up to 5 tokens), gives it random 0/1 rewards so that most
groups have non-zero advantages, takes one SGD step on a first minibatch so that the second
minibatch is off-policy (as minibatch k = 1 of Algorithm 2), and times on that minibatch:

* the update itself: teacher-forced forward, ``policy_loss``, backward;
* ``token_sequence_gradient_comparison(..., params=...)`` given the forward's log-probs;
* ``step_diagnostics`` on the whole rollout batch.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/diagnostics_cost.py [--repeats 7]

Prints a markdown table of median milliseconds. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import collections
import platform
import random
import statistics
import time

import torch

from sapo_lab import group_advantages, policy_loss
from sapo_lab.objective.diagnostics import step_diagnostics, token_sequence_gradient_comparison
from sapo_lab.tasks import make_problem
from sapo_lab.training.model import load_model_and_tokenizer, response_logprobs
from sapo_lab.training.rollout import rollout


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--minibatches", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tok = load_model_and_tokenizer("cpu-tiny", seed=0)
    rng = random.Random(0)
    problems = [make_problem(rng.randrange(100), rng.randrange(100), 2) for _ in range(args.prompts)]
    batch = rollout(model, tok, problems, num_generations=args.generations, max_completion_length=5,
                    generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 2, (args.prompts, args.generations), generator=g).float()
    batch.advantages = group_advantages(rewards).flatten()
    first, second = batch.minibatches(args.minibatches, generator=torch.Generator().manual_seed(2))[:2]
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    logp = response_logprobs(model, first.input_ids, first.attention_mask, first.response_mask)
    policy_loss(logp, first.behavior_logp, first.advantages, first.completion_mask).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    mb, mask = second, second.completion_mask
    params = list(model.parameters())

    def update():
        lp = response_logprobs(model, mb.input_ids, mb.attention_mask, mb.response_mask)
        loss = policy_loss(lp, mb.behavior_logp, mb.advantages, mask).loss
        torch.autograd.grad(loss, params)

    def forward():
        return response_logprobs(model, mb.input_ids, mb.attention_mask, mb.response_mask)

    t_update, _ = timed(update, args.repeats)
    t_forward, lp = timed(forward, args.repeats)
    t_cmp, out = timed(lambda: token_sequence_gradient_comparison(lp, mb.behavior_logp, mb.advantages, mask,
                                                                  params=params), args.repeats)
    # Worst case: every (length bin x tail/bulk) cell non-empty, so 12 vector-Jacobian products.
    m = mask.bool()
    lengths = m.sum(-1)
    max_z = torch.where(m, (lp.detach() - mb.behavior_logp).abs(), 0.0).amax(-1)
    signed = mb.advantages != 0
    split_len = int(lengths[signed].float().quantile(0.5)) - 1
    split_tail = float(max_z[signed].quantile(0.5))
    t_cmp4, out4 = timed(lambda: token_sequence_gradient_comparison(
        lp, mb.behavior_logp, mb.advantages, mask, params=params, length_edges=(split_len,),
        tail_log_ratio=split_tail), args.repeats)
    cells4 = [out4[f"tokseq_{a}_responses"] for a in (f"len_le{split_len}", f"len_gt{split_len}", "ratio_bulk",
                                                      "ratio_tail")]
    with torch.no_grad():
        lp_all, ent = response_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_mask,
                                        return_entropy=True)
    z_all = torch.where(batch.completion_mask.bool(), lp_all - batch.behavior_logp, 0.0)
    t_step, row = timed(lambda: step_diagnostics(rewards=rewards, advantages=batch.advantages,
                                                 mask=batch.completion_mask, entropy=ent, log_ratio=z_all),
                        args.repeats)
    n_params = sum(p.numel() for p in params)
    print(f"cpu-tiny: {n_params:,} parameters; minibatch {mask.shape[0]} responses, {int(mask.sum())} tokens; "
          f"rollout batch {batch.num_responses} responses; torch {torch.__version__}, {platform.processor() or 'cpu'}, "
          f"1 thread, median of {args.repeats}")
    print("\n| call | median ms |\n|---|---:|")
    print(f"| one update (forward + policy_loss + backward) | {t_update:.1f} |")
    print(f"| teacher-forced forward alone | {t_forward:.1f} |")
    print(f"| token_sequence_gradient_comparison (params, given logp) | {t_cmp:.1f} |")
    print(f"| token_sequence_gradient_comparison, all four cells non-empty (strata sizes {cells4}) | {t_cmp4:.1f} |")
    print(f"| step_diagnostics (whole rollout batch) | {t_step:.2f} |")
    print(f"\nlengths of the minibatch's signed responses: {sorted(collections.Counter(lengths[signed].tolist()).items())}")
    print(f"\nkeys: comparison {len(out)}, step {len(row)}; tokseq_cos {out['tokseq_cos']:.6f}, "
          f"abs_err {out['tokseq_abs_err']:.3e}, cov_norm {out['tokseq_cov_norm']:.3e}, "
          f"scalar_norm {out['tokseq_scalar_norm']:.3e}, responses {out['tokseq_responses']}")


if __name__ == "__main__":
    main()
