"""nano_sapo: SAPO on a tiny GPT-2 learning addition, in one file you can read top to bottom.

    python -m sapo_lab.course.nano_sapo                  # SAPO, about two minutes on a laptop CPU
    python -m sapo_lab.course.nano_sapo --loss grpo      # the same loop with GRPO's clipped loss

The task: "47+38=" -> "580" (the sum's digits written lowest first, then an end token), reward 1 for exactly
that, else 0. A short supervised warm start makes the model right some of the time; then each step samples G
answers per prompt, scores them, turns rewards into group advantages, and takes M optimizer steps on minibatches
of that one batch with SAPO's loss. Only the model's shape (sapo_lab's cpu-tiny GPT-2) and the addition problems
come from sapo_lab; sampling, scoring, advantages, the loss and the update are all here.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from sapo_lab.tasks.addition import make_splits
from sapo_lab.training.model import build_model

# ---- the vocabulary: one token per character, as sapo_lab's character tokenizer numbers them --------------------
PAD, EOS = 0, 1
CHARS = "0123456789+="
TOKEN = {c: i + 3 for i, c in enumerate(CHARS)}  # ids 0, 1, 2 are pad, eos, unk
CHAR = {i: c for c, i in TOKEN.items()}


@dataclass
class Settings:
    """Every setting of a nano_sapo run, with its default."""

    steps: int = 150  # RL steps (one sampled batch each)
    prompts: int = 32  # P prompts per step
    group: int = 8  # G answers per prompt
    minibatches: int = 4  # M optimizer steps per batch: the later ones are off-policy, where the gate acts
    lr: float = 2e-4
    warmup: int = 10  # optimizer steps of linear learning-rate warm-up: Adam's first steps are the largest
    tau_pos: float = 1.0  # SAPO's temperature for tokens with a positive advantage
    tau_neg: float = 1.05  # and for a negative one (the paper's choice: a little sharper)
    warm_updates: int = 1000  # supervised warm-start updates at most (most seeds stop far sooner)
    warm_target: float = 0.3  # stop the warm start once held-out Pass@1 reaches this
    eval_every: int = 25
    seed: int = 0


# ---- the task: addition problems, their token ids, and the verifier -----------------------------------------------
def encode(text: str) -> list[int]:
    """The token ids of a prompt or an answer."""
    return [TOKEN[c] for c in text]


def left_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask, padded on the left so every row ends at its last real token."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), PAD)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row)
    return ids, (ids != PAD).long()


def reward(answer_ids: list[int], problem) -> float:
    """1 when the answer is exactly the canonical digits followed by the end token, else 0."""
    if EOS not in answer_ids:
        return 0.0
    text = "".join(CHAR.get(t, "?") for t in answer_ids[:answer_ids.index(EOS)])
    return float(text == problem.answer)


# ---- the policy: log-probabilities and sampling -----------------------------------------------------------------
def token_logprobs(model, ids, attention, answer_len):
    """log pi(token) of the last ``answer_len`` tokens of each row, teacher-forced: (B, answer_len)."""
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
    logits = logits[:, -answer_len - 1:-1]  # the logits at t predict token t + 1
    return F.log_softmax(logits, -1).gather(-1, ids[:, -answer_len:, None])[..., 0]


@torch.no_grad()
def sample(model, prompts, max_len, greedy=False):
    """Answers for a batch of prompt ids: (B, max_len) token ids and the mask of real answer tokens."""
    ids, attention = left_pad(prompts)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    answer_mask = []
    for _ in range(max_len):
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits[:, -1]
        token = logits.argmax(-1) if greedy else torch.multinomial(F.softmax(logits, -1), 1)[:, 0]
        token = torch.where(done, torch.full_like(token, PAD), token)
        answer_mask.append(~done)
        done = done | (token == EOS)
        ids = torch.cat([ids, token[:, None]], 1)
        attention = torch.cat([attention, answer_mask[-1].long()[:, None]], 1)
    return ids, attention, torch.stack(answer_mask, 1).float()


def pass_at_1(model, problems, max_len) -> float:
    """The share of problems whose greedy answer is right."""
    ids, _, _ = sample(model, [encode(p.prompt) for p in problems], max_len, greedy=True)
    return sum(reward(row[-max_len:].tolist(), p) for row, p in zip(ids, problems, strict=True)) / len(problems)


# ---- advantages and the two losses --------------------------------------------------------------------------------
def group_advantages(rewards, eps=1e-6):
    """(P, G) rewards -> each answer's reward minus its group's mean, over the group's population std."""
    centred = rewards - rewards.mean(-1, keepdim=True)
    return centred / (rewards.std(-1, unbiased=False, keepdim=True) + eps)


def masked_mean(values, mask, aggregation):
    """per_response: each answer's mean over its tokens, then the mean over answers; token_pool: one mean."""
    if aggregation == "per_response":
        return ((values * mask).sum(-1) / mask.sum(-1)).mean()
    return (values * mask).sum() / mask.sum()


def sapo_loss(logp, old_logp, advantages, mask, tau_pos=1.0, tau_neg=1.05, aggregation="per_response"):
    """SAPO: -A (4/tau) [sigmoid(tau (r - 1)) - 1/2] per token, tau by the sign of A. Its r-derivative is
    -A w_tau(r); the 1/2 changes no gradient and makes the loss 0 on-policy (r = 1), as sapo_lab reports it."""
    ratio = torch.exp(logp - old_logp.detach())
    adv = advantages[:, None].expand_as(logp)
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    return masked_mean(-adv * 4 / tau * (torch.sigmoid(tau * (ratio - 1)) - 0.5), mask, aggregation)


def grpo_loss(logp, old_logp, advantages, mask, eps=0.2, aggregation="per_response", **_):
    """GRPO: -min(r A, clip(r, 1 - eps, 1 + eps) A) per token."""
    ratio = torch.exp(logp - old_logp.detach())
    adv = advantages[:, None]
    clipped = torch.clamp(ratio, 1 - eps, 1 + eps)
    return masked_mean(-torch.minimum(ratio * adv, clipped * adv), mask, aggregation)


# ---- the warm start: supervised learning on the right answers ----------------------------------------------------
def warm_start(model, splits, s: Settings, max_len, log=print):
    """Supervised steps on right answers until dev Pass@1 reaches ``s.warm_target`` (or ``s.warm_updates``)."""
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = random.Random(s.seed)
    for update in range(1, s.warm_updates + 1):
        batch = gen.sample(splits["train"], 64)
        ids, attention = left_pad([encode(p.prompt + p.answer) + [EOS] for p in batch])
        answer_len = len(batch[0].answer) + 1
        loss = -token_logprobs(model, ids, attention, answer_len).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if update % 25 == 0:
            score = pass_at_1(model, splits["dev"], max_len)
            log(f"warm start {update:4d}  loss {loss.item():.3f}  dev Pass@1 {score:.3f}")
            if score >= s.warm_target:
                return


# ---- reinforcement learning ----------------------------------------------------------------------------------------
def rl_step(model, opt, schedule, problems, s: Settings, loss_fn, max_len):
    """Sample G answers per prompt, score them, take M minibatch steps."""
    asked = [p for p in problems for _ in range(s.group)]  # groups contiguous
    ids, attention, mask = sample(model, [encode(p.prompt) for p in asked],
                                  max_len)
    rewards = torch.tensor([reward(row[-max_len:].tolist(), p)
                            for row, p in zip(ids, asked, strict=True)])
    advantages = group_advantages(rewards.view(len(problems), s.group))
    advantages = advantages.reshape(-1)
    with torch.no_grad():  # the behaviour policy: the one that sampled
        old_logp = token_logprobs(model, ids, attention, max_len)
    order = torch.randperm(len(asked))
    for chunk in order.chunk(s.minibatches):
        logp = token_logprobs(model, ids[chunk], attention[chunk], max_len)
        loss = loss_fn(logp, old_logp[chunk], advantages[chunk], mask[chunk],
                       tau_pos=s.tau_pos, tau_neg=s.tau_neg)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
    return rewards.mean().item(), loss.item()


def train(s: Settings | None = None, loss_fn=sapo_loss, log=print) -> dict:
    """Warm start, then ``s.steps`` RL steps; returns held-out Pass@1 before and after RL."""
    s = s or Settings()
    torch.manual_seed(s.seed)
    splits = make_splits(seed=0, min_digits=1, max_digits=2, num_train=4000, num_dev=128, num_eval=256)
    max_len = len(splits["train"][0].answer) + 1  # the answer's digits and the end token
    model = build_model("cpu-tiny", seed=s.seed).float()  # float32 even where a notebook set float64
    start = time.time()
    warm_start(model, splits, s, max_len, log)
    before = pass_at_1(model, splits["eval"], max_len)
    log(f"held-out Pass@1 after the warm start: {before:.3f}  ({time.time() - start:.0f} s)")
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.99))
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: min(1.0, (n + 1) / s.warmup))
    gen = random.Random(s.seed + 1)
    for step in range(1, s.steps + 1):
        mean_reward, loss = rl_step(model, opt, schedule, gen.sample(splits["train"], s.prompts), s, loss_fn, max_len)
        line = f"step {step:3d}  reward {mean_reward:.3f}  loss {loss:+.4f}"
        if step % s.eval_every == 0 or step == s.steps:
            line += f"  dev Pass@1 {pass_at_1(model, splits['dev'], max_len):.3f}"
        log(line + f"  ({time.time() - start:.0f} s)")
    after = pass_at_1(model, splits["eval"], max_len)
    log(f"held-out Pass@1: {before:.3f} -> {after:.3f}")
    return {"before": before, "after": after, "model": model}


def main(argv=None) -> None:
    """The command line: ``python -m sapo_lab.course.nano_sapo [--loss grpo] [--steps N] [--seed S]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--loss", choices=("sapo", "grpo"), default="sapo",
                        help="policy loss: SAPO's soft gate or GRPO's clipped ratio")
    parser.add_argument("--steps", type=int, default=Settings.steps, help="RL steps after the warm start")
    parser.add_argument("--seed", type=int, default=Settings.seed,
                        help="seed of the initial weights and the draws while training")
    args = parser.parse_args(argv)
    if args.steps < 0:
        parser.error(f"--steps must be >= 0, got {args.steps}")
    torch.set_num_threads(1)  # a model this small runs fastest on one thread
    train(Settings(steps=args.steps, seed=args.seed), sapo_loss if args.loss == "sapo" else grpo_loss)


if __name__ == "__main__":
    main()
