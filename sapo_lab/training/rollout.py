"""Rollouts (Algorithm 1): sample G responses per prompt and keep the bookkeeping explicit.

The behavior policy is the model as it is when sampling starts; its log-probs are
taken from the very forward pass that sampled each token (at the sampling
temperature), so no second "old policy" pass and no model copy are needed. Sampling
uses the KV cache: each new token costs one single-position forward.

Layout of every tensor over a batch of N = num_prompts * G responses:
columns ``[0, prompt_width)`` hold the left-padded prompt, columns
``[prompt_width, prompt_width + T)`` the response, right-padded after EOS.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..errors import NonFiniteError
from ..tasks import Problem, RewardFn
from .device import autocast_for, synchronize
from .model import position_ids_from_mask


@dataclass
class Episode:
    """One sampled response and how the verifier judged it."""

    problem: Problem
    completion: str
    completion_ids: list[int]
    finished: bool  # EOS produced within the length limit
    reward: float
    reason: str
    group: int  # index of the prompt within its rollout batch


@dataclass
class Responses:
    """The token layout every batch of responses shares: (n, P+T) ids and masks, (n, T) behavior log-probs."""

    input_ids: torch.Tensor  # (n, P+T)
    attention_mask: torch.Tensor  # (n, P+T)
    response_mask: torch.Tensor  # (n, P+T), 1 on response tokens incl. EOS
    behavior_logp: torch.Tensor  # (n, T)

    @property
    def completion_mask(self) -> torch.Tensor:
        """(n, T) mask over the response columns, aligned with ``behavior_logp``."""
        return self.response_mask[:, -self.behavior_logp.shape[1] :]


@dataclass
class MiniBatch(Responses):
    """What one optimizer step of Algorithm 2 reads: fixed advantages and behavior log-probs."""

    advantages: torch.Tensor  # (n,)
    ref_logp: torch.Tensor | None = None  # (n, T), only with a KL penalty

    def select(self, rows: torch.Tensor) -> MiniBatch:
        """The rows picked by an index or boolean tensor."""
        if rows.dtype == torch.bool:  # one nonzero for every field, not one per field
            rows = rows.nonzero().squeeze(1)
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(MiniBatch)}
        return MiniBatch(**{k: None if v is None else v.index_select(0, rows) for k, v in values.items()})


@dataclass
class RolloutBatch(Responses):
    """All responses of one rollout step, G consecutive rows per prompt."""

    rewards: torch.Tensor  # (N,)
    num_generations: int
    episodes: list[Episode] = field(default_factory=list)
    entropy: torch.Tensor | None = None  # (N, T) per-token entropy at sampling
    advantages: torch.Tensor | None = None  # (N,), set by the trainer
    ref_logp: torch.Tensor | None = None
    sample_s: float = 0.0  # wall time inside the sampling loop (model time, for the overhead budget)

    @property
    def num_responses(self) -> int:
        """N = number of prompts * G."""
        return self.input_ids.shape[0]

    def grouped_rewards(self) -> torch.Tensor:
        """Rewards shaped (num_prompts, G) for ``group_advantages``."""
        return self.rewards.view(-1, self.num_generations)

    def minibatches(self, num_minibatches: int, generator: torch.Generator | None = None) -> list[MiniBatch]:
        """Split the responses into M minibatches (shuffled when a generator is given).

        Minibatch k is trained after k optimizer steps on the same rollout, so for k > 0
        the data is genuinely off-policy.
        """
        if self.advantages is None:
            raise ValueError("advantages are not set; compute them before splitting into minibatches")
        n = self.num_responses
        if not 1 <= num_minibatches <= n:
            raise ValueError(f"num_minibatches must be in [1, {n}] for {n} responses, got {num_minibatches}")
        order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
        order = order.to(self.input_ids.device)
        everything = MiniBatch(**{f.name: getattr(self, f.name) for f in dataclasses.fields(MiniBatch)})
        return [everything.select(idx) for idx in torch.tensor_split(order, num_minibatches)]


def encode_prompts(tokenizer, prompts: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(input_ids, attention_mask)`` of the prompts, on ``device``."""
    enc = tokenizer(prompts, padding=True, return_tensors="pt", add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def cache_argument(model) -> str:
    """The name under which ``model.forward`` takes and returns its KV cache.

    transformers 5 calls it ``cache``; 4.x calls it ``past_key_values`` (and a 4.x model
    would swallow ``cache=`` through ``**kwargs`` and sample without a cache).
    """
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def sample(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    num_samples_per_prompt: int = 1,
):
    """Sample continuations with the KV cache.

    With ``num_samples_per_prompt = G`` each prompt is run through the model once and
    its cache is copied G times (rows ``i*G .. i*G+G-1`` continue prompt i), which
    saves the repeated prompt forwards of a group.

    ``temperature == 0`` means greedy. Returns ``(completion_ids, completion_mask,
    logp, entropy, finished)`` with completions (N, T), T <= max_new_tokens; the mask
    covers tokens up to and including EOS; ``logp``/``entropy`` are from the sampling
    distribution (temperature-scaled logits; at T=0 the unscaled ones).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    was_training = model.training
    model.eval()
    device = prompt_ids.device
    g = int(num_samples_per_prompt)
    if g < 1:
        raise ValueError(f"num_samples_per_prompt must be >= 1, got {num_samples_per_prompt}")
    n = prompt_ids.shape[0] * g
    attn = prompt_mask.repeat_interleave(g, dim=0)
    pos = position_ids_from_mask(prompt_mask)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    toks, masks, logps, ents = [], [], [], []
    past, cache_name = None, cache_argument(model)
    step_ids, step_pos, step_attn = prompt_ids, pos, prompt_mask
    try:
        for i in range(max_new_tokens):
            with autocast_for(device):
                out = model(
                    input_ids=step_ids,
                    attention_mask=step_attn,
                    position_ids=step_pos,
                    use_cache=True,
                    logits_to_keep=1,
                    **{cache_name: past},
                )
            past = getattr(out, cache_name)
            logits = out.logits[:, -1, :].float()
            if i == 0 and g > 1:  # share the prompt forward across the group
                past.batch_repeat_interleave(g)
                logits = logits.repeat_interleave(g, dim=0)
                step_pos = step_pos.repeat_interleave(g, dim=0)
            if not bool(torch.isfinite(logits).all()):
                raise NonFiniteError("the policy produced NaN or inf logits while sampling")
            if temperature > 0:
                logits = logits / temperature
            logp_all = F.log_softmax(logits, dim=-1)
            if temperature > 0:
                nxt = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
            else:
                nxt = logits.argmax(-1)
            alive = ~done
            nxt = torch.where(alive, nxt, torch.full_like(nxt, pad_token_id))
            toks.append(nxt)
            masks.append(alive)
            zero = torch.zeros_like(logits[:, 0])
            logps.append(torch.where(alive, logp_all.gather(-1, nxt[:, None]).squeeze(-1), zero))
            ents.append(torch.where(alive, -(logp_all.exp() * logp_all).sum(-1), zero))
            done = done | (alive & (nxt == eos_token_id))
            if bool(done.all()):
                break
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            step_ids, step_attn = nxt[:, None], attn
            step_pos = step_pos[:, -1:] + 1
    finally:
        model.train(was_training)
    return (
        torch.stack(toks, 1),
        torch.stack(masks, 1).long(),
        torch.stack(logps, 1),
        torch.stack(ents, 1),
        done,
    )


def score_completions(
    tokenizer,
    owners: list[Problem],
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    finished: torch.Tensor,
    reward_fn: RewardFn,
    group_size: int = 1,
) -> list[Episode]:
    """Decode sampled completions and score each with ``reward_fn``: the one scoring path of rollouts and evaluation.

    Row i of the (N, T) tensors answers ``owners[i]`` and belongs to group ``i // group_size``.
    The text is what precedes EOS; special tokens stay in it, so that e.g. a sampled
    ``<unk>`` makes an answer invalid rather than vanish.
    """
    episodes = []
    rows = zip(completion_ids.cpu().tolist(), completion_mask.cpu().tolist(), finished.cpu().tolist(), strict=True)
    texts: dict[tuple[int, ...], str] = {}  # the samples of a group often agree: decode each distinct text once
    for i, (ids, m, fin) in enumerate(rows):
        ids = [t for t, keep in zip(ids, m, strict=True) if keep]
        shown = tuple(ids[:-1] if fin else ids)
        text = texts.get(shown)
        if text is None:
            text = texts[shown] = tokenizer.decode(list(shown), skip_special_tokens=False)
        reward, reason = reward_fn(text, fin, owners[i])
        reward = float(reward)
        if reward != reward or reward in (float("inf"), float("-inf")):
            raise NonFiniteError(f"reward_fn returned {reward} for completion {text!r} of prompt {owners[i].prompt!r}")
        episodes.append(Episode(owners[i], text, ids, fin, reward, reason, i // group_size))
    return episodes


@dataclass
class Sampled:
    """Responses sampled for some prompts and scored: what :func:`sample_and_score` returns.

    ``prompt_ids``/``prompt_mask`` hold each prompt once; every other field has one row
    per response, ``samples_per_prompt`` consecutive rows per prompt.
    """

    prompt_ids: torch.Tensor  # (P, prompt width)
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor  # (P * G, T)
    completion_mask: torch.Tensor
    logp: torch.Tensor  # behavior log-probs of the sampled tokens
    entropy: torch.Tensor
    finished: torch.Tensor
    episodes: list[Episode]
    sample_s: float  # wall time inside the sampling loop


def sample_and_score(
    model,
    tokenizer,
    problems: list[Problem],
    *,
    reward_fn: RewardFn,
    samples_per_prompt: int,
    max_completion_length: int,
    temperature: float,
    generator: torch.Generator | None,
    device,
) -> Sampled:
    """The one sample-and-score path of rollouts, evaluation and the per-family breakdown.

    Encodes the prompts, samples ``samples_per_prompt`` responses to each (the prompt
    forward shared by the group), and scores every response with ``reward_fn``
    (:func:`score_completions`).
    """
    ids, mask = encode_prompts(tokenizer, [p.prompt for p in problems], device)
    t0 = time.perf_counter()
    comp, comp_mask, logp, ent, finished = sample(
        model,
        ids,
        mask,
        num_samples_per_prompt=samples_per_prompt,
        max_new_tokens=max_completion_length,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        temperature=temperature,
        generator=generator,
    )
    synchronize(device)
    sample_s = time.perf_counter() - t0
    owners = [p for p in problems for _ in range(samples_per_prompt)]
    episodes = score_completions(tokenizer, owners, comp, comp_mask, finished, reward_fn, group_size=samples_per_prompt)
    return Sampled(ids, mask, comp, comp_mask, logp, ent, finished, episodes, sample_s)


def rollout(
    model,
    tokenizer,
    problems: list[Problem],
    *,
    reward_fn: RewardFn,
    num_generations: int,
    max_completion_length: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    device=None,
) -> RolloutBatch:
    """Sample ``num_generations`` responses per problem, score them with ``reward_fn`` and pack a RolloutBatch.

    ``reward_fn(completion_text, finished, problem) -> (reward, reason)`` is usually the
    task's ``verify``; any other reward with that signature works.
    """
    if num_generations < 1:
        raise ValueError(f"num_generations must be >= 1, got {num_generations}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    s = sample_and_score(model, tokenizer, problems, reward_fn=reward_fn, samples_per_prompt=num_generations,
                         max_completion_length=max_completion_length, temperature=temperature, generator=generator,
                         device=device)
    prompt_ids = s.prompt_ids.repeat_interleave(num_generations, dim=0)
    prompt_mask = s.prompt_mask.repeat_interleave(num_generations, dim=0)
    return RolloutBatch(
        input_ids=torch.cat([prompt_ids, s.completion_ids], 1),
        attention_mask=torch.cat([prompt_mask, s.completion_mask], 1),
        response_mask=torch.cat([torch.zeros_like(prompt_mask), s.completion_mask], 1),
        behavior_logp=s.logp,
        rewards=torch.tensor([ep.reward for ep in s.episodes], dtype=torch.float32, device=device),
        num_generations=num_generations,
        episodes=s.episodes,
        entropy=s.entropy,
        sample_s=s.sample_s,
    )
