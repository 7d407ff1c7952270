"""sapo_lab.policy_loss and TRL's own GRPOTrainer loss give the same gradient in float64.

Identical inputs: one float64 GPT-2 (cpu-micro), the same prompts and completions, frozen
behavior log-probs that differ from the current ones (the K > 1 situation: ratios != 1) and
fixed advantages. TRL computes its log-probs (fused LM head) and loss in
``GRPOTrainer._compute_loss``; sapo_lab uses ``response_logprobs`` and ``policy_loss``. The
TRL trainer is configured through ``to_grpo_config``, so the mapping is tested too.
Where the two must differ (an empty response, the loss centring) the exact difference is shown.
Set SAPO_LAB_TRL_EQUIVALENCE_JSON=path to write the measured differences (the book shows them).
"""

import json
import os

import pytest
import torch
from _micro import micro
from _trl import require_trl

trl = require_trl()

from sapo_lab.integrations.trl import TESTED_TRL_VERSION, reward_function, to_dataset, to_grpo_config  # noqa: E402
from sapo_lab.objective.losses import policy_loss  # noqa: E402
from sapo_lab.training.model import build_model, response_logprobs  # noqa: E402
from sapo_lab.training.tokenizer import build_char_tokenizer  # noqa: E402
from sapo_lab.training.trainer import splits_for  # noqa: E402

TOL = 1e-12
RESULTS: dict = {}

CASES = {
    "sapo_token": {"loss.loss_type": "sapo", "loss.importance_sampling_level": "token"},
    "sapo_sequence": {"loss.loss_type": "sapo", "loss.importance_sampling_level": "sequence"},
    "grpo_clip_token": {"loss.loss_type": "grpo", "loss.epsilon": 0.2, "loss.epsilon_high": 0.28},
    "gspo_sequence": {"loss.loss_type": "gspo", "loss.epsilon": 0.05},
}


def test_trl_is_the_tested_version():
    assert trl.__version__.startswith(TESTED_TRL_VERSION + "."), (trl.__version__, TESTED_TRL_VERSION)


def _trainer(cfg, model, tok, tmp_path):
    args = to_grpo_config(cfg, output_dir=str(tmp_path / "trl"), use_cpu=True, bf16=False, fp16=False, logging_steps=1)
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward_function(eos_token_ids=[tok.eos_token_id]),
        args=args,
        train_dataset=to_dataset(splits_for(cfg)["train"][:16]),
        processing_class=tok,
    )
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); one micro-batch per step, as mapped
    trainer.model.train()
    return trainer


def _batch(cfg, tok, lengths, seed=0, spread=0.35):
    """Prompts, right-padded completions, behavior log-probs (current ones shifted) and advantages."""
    gen = torch.Generator().manual_seed(seed)
    problems = splits_for(cfg)["train"][: len(lengths)]
    prompt_ids = torch.tensor([tok.encode(p.prompt) for p in problems])  # fixed width: no left padding
    width = max(lengths)
    completion_ids = torch.randint(3, len(tok), (len(lengths), width), generator=gen)
    completion_mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
    completion_ids = completion_ids * completion_mask  # pad id 0 after the end
    adv = torch.randn(len(lengths), generator=gen, dtype=torch.float64)
    adv[1] = 0.0  # a zero-advantage response is kept in the batch
    shift = spread * torch.randn(len(lengths), width, generator=gen, dtype=torch.float64)
    return prompt_ids, completion_ids, completion_mask, adv, shift


def _grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])


def _both(case, lengths, tmp_path, seed=0):
    """(TRL loss, TRL grads, sapo_lab output, sapo_lab grads, inputs) on identical inputs."""
    cfg = micro(**CASES[case], **{"rollout.temperature": 0.9})
    tok = build_char_tokenizer()
    model = build_model("cpu-micro", seed=seed).double()
    trainer = _trainer(cfg, model, tok, tmp_path)
    assert next(trainer.model.parameters()).dtype == torch.float64
    prompt_ids, completion_ids, completion_mask, adv, shift = _batch(cfg, tok, lengths, seed)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([torch.ones_like(prompt_ids), completion_mask], dim=1)
    response_mask = torch.cat([torch.zeros_like(prompt_ids), completion_mask], dim=1)
    with torch.no_grad():
        current = response_logprobs(model, input_ids, attention, response_mask, temperature=cfg.rollout.temperature)
    behavior = (current + shift) * completion_mask  # ratios exp(-shift) != 1, as after earlier minibatches

    def sapo_lab_logps(model_, input_ids_, attention_mask_, logits_to_keep, **kwargs):
        # TRL's fused LM head computes log-probs in float32 tiles (trl/kernels/chunked_logprob.py); feeding
        # both losses the same float64 log-probs compares the loss computations at float64 precision
        # (test_trl_logprobs_match_to_float32 checks the log-prob stage on its own).
        rmask = torch.zeros_like(input_ids_)
        rmask[:, -logits_to_keep:] = attention_mask_[:, -logits_to_keep:]
        logp_, ent = response_logprobs(model_, input_ids_, attention_mask_, rmask, cfg.rollout.temperature, return_entropy=True)
        return logp_, ent, None

    trainer._get_per_token_logps_and_entropies = sapo_lab_logps
    model.zero_grad(set_to_none=True)
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": adv,
        "old_per_token_logps": behavior,
    }
    trl_loss = trainer._compute_loss(trainer.model, inputs)
    trl_loss.backward()
    trl_grads = _grads(model).clone()

    model.zero_grad(set_to_none=True)
    logp = response_logprobs(model, input_ids, attention, response_mask, temperature=cfg.rollout.temperature)
    lc = cfg.loss
    out = policy_loss(
        logp, behavior, adv, completion_mask,
        loss_type=lc.loss_type, tau_pos=lc.sapo_temperature_pos, tau_neg=lc.sapo_temperature_neg,
        clip_eps_low=lc.epsilon, clip_eps_high=lc.epsilon if lc.epsilon_high is None else lc.epsilon_high,
        importance_sampling_level=lc.importance_sampling_level, aggregation=lc.aggregation,
    )
    out.loss.backward()
    ours = _grads(model).clone()
    return trl_loss.detach(), trl_grads, out, ours, (cfg, adv, shift, completion_mask, logp.detach(), behavior)


def _record(name, **values):
    RESULTS[name] = values
    path = os.environ.get("SAPO_LAB_TRL_EQUIVALENCE_JSON")
    if path:
        with open(path, "w") as f:
            json.dump({"trl_version": trl.__version__, "torch": torch.__version__, "dtype": "float64",
                       "results": RESULTS}, f, indent=2, sort_keys=True)


@pytest.fixture(autouse=True)
def float64_default():
    """TRL builds SAPO's temperatures with torch.where(A > 0, float, float), which takes torch's default
    dtype: in float32, tau_neg = 1.05 is rounded (relative 5e-8). float64 throughout compares the formulas."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("case", list(CASES))
def test_same_gradient_as_trl(case, tmp_path):
    lengths = [5, 3, 4, 1, 5, 2]
    trl_loss, trl_grads, out, ours, (cfg, adv, shift, mask, logp, behavior) = _both(case, lengths, tmp_path)
    z = (logp - behavior)[mask.bool()]
    assert float(z.abs().min()) > 1e-3  # the ratios are genuinely != 1 (K > 1)
    if cfg.loss.loss_type != "sapo":
        s = out.stats
        assert 0.0 < s["clip_frac"] < 1.0, s  # some tokens clipped, some not: the clip branch is exercised
    scale = float(ours.abs().max())
    assert scale > 1e-3  # a real gradient, not two zeros
    diff = float((trl_grads - ours).abs().max())
    _record(case, max_abs_grad_diff=diff, max_abs_grad=scale, responses=len(lengths))
    assert diff < TOL * max(1.0, scale), (case, diff, scale)


def test_trl_logprobs_match_to_float32(tmp_path):
    """TRL's own log-prob kernel on the same float64 model agrees with response_logprobs to float32 precision."""
    cfg = micro(**{"rollout.temperature": 0.9})
    tok = build_char_tokenizer()
    model = build_model("cpu-micro", seed=0).double()
    trainer = _trainer(cfg, model, tok, tmp_path)
    prompt_ids, completion_ids, mask, _, _ = _batch(cfg, tok, [5, 3, 4, 1, 5, 2])
    ids = torch.cat([prompt_ids, completion_ids], 1)
    att = torch.cat([torch.ones_like(prompt_ids), mask], 1)
    ours = response_logprobs(model, ids, att, torch.cat([torch.zeros_like(prompt_ids), mask], 1), temperature=0.9)
    theirs, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, completion_ids.size(1))
    diff = float(((ours - theirs.double()) * mask).abs().max())
    _record("logprobs_trl_kernel_vs_sapo_lab", max_abs_diff=diff, trl_dtype=str(theirs.dtype))
    assert diff < 1e-5  # float32 rounding of log-probs of order 1; a wrong temperature or shift is far larger


@pytest.mark.parametrize("case", ["sapo_token", "grpo_clip_token"])
def test_empty_response_scales_trl_gradient_by_n_over_b(case, tmp_path):
    """TRL divides by all B responses, sapo_lab by the N non-empty ones: grad_TRL = (N/B) grad_sapo_lab."""
    lengths = [5, 3, 0, 4, 2, 0]
    _, trl_grads, _, ours, _ = _both(case, lengths, tmp_path)
    b, n = len(lengths), sum(1 for x in lengths if x > 0)
    exact = float((trl_grads - (n / b) * ours).abs().max())
    unscaled = float((trl_grads - ours).abs().max())
    _record(f"{case}_empty_responses", n_over_b=n / b, max_abs_diff_after_scaling=exact, max_abs_diff_unscaled=unscaled)
    assert exact < TOL * max(1.0, float(ours.abs().max()))
    assert unscaled > 1e-4  # without the factor they really differ


@pytest.mark.parametrize("case", ["sapo_token", "sapo_sequence"])
def test_trl_reports_the_uncentred_sapo_loss(case, tmp_path):
    """Same gradient, but TRL's loss is sapo_lab's minus mean_i(2 A_i / tau_i) (no empty response)."""
    lengths = [5, 3, 4, 1, 5, 2]
    trl_loss, trl_grads, out, ours, (cfg, adv, *_rest) = _both(case, lengths, tmp_path, seed=1)
    lc = cfg.loss
    tau = torch.where(adv > 0, torch.tensor(lc.sapo_temperature_pos), torch.tensor(lc.sapo_temperature_neg)).double()
    offset = float((-2.0 * adv / tau).mean())
    gap = float(trl_loss) - float(out.loss.detach())
    _record(f"{case}_loss_centring", trl_minus_sapo_lab=gap, predicted=offset)
    assert abs(offset) > 1e-3
    assert abs(gap - offset) < TOL
    assert float((trl_grads - ours).abs().max()) < TOL * max(1.0, float(ours.abs().max()))
