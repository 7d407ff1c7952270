"""SAPO's gate statistics in TRL's log: TRL's loss and gradient unchanged, the statistics right, the doctor reading them.

The loss and gradient are compared with TRL's own GRPOTrainer on identical float64 inputs (exact equality);
the statistics against formulas written here with plain torch (sech², linear-interpolated quantiles, the
per-response weights); a real tiny TRL run (cpu-micro, exported config) is then read by ``python -m sapo_lab
doctor``, with the diagnostics (SAPO) and without them (GRPO: TRL's own log only).
"""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from _micro import micro
from _trl import require_trl

trl = require_trl()

from sapo_lab.integrations.trl import reward_function, to_dataset, to_grpo_config  # noqa: E402
from sapo_lab.integrations.trl_diagnostics import NAMES, gate_statistics, sapo_diagnostics_trainer  # noqa: E402
from sapo_lab.training.model import build_model  # noqa: E402
from sapo_lab.training.tokenizer import build_char_tokenizer  # noqa: E402
from sapo_lab.training.trainer import splits_for  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LENGTHS = [5, 3, 4, 1, 5, 2]


@pytest.fixture(autouse=True)
def float64_default():
    """TRL builds SAPO's temperatures in torch's default dtype: float64 compares the formulas, not roundings."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _trainer(cls, cfg, model, tok, tmp_path):
    args = to_grpo_config(cfg, output_dir=str(tmp_path / "trl"), use_cpu=True, bf16=False, fp16=False, logging_steps=1)
    trainer = cls(model=model, reward_funcs=reward_function(eos_token_ids=[tok.eos_token_id]), args=args,
                  train_dataset=to_dataset(splits_for(cfg)["train"][:16]), processing_class=tok)
    trainer.current_gradient_accumulation_steps = 2  # TRL divides the loss by it: the division must stay TRL's
    trainer.model.train()
    return trainer


def _inputs(cfg, tok, seed=0, spread=0.6, old=True):
    gen = torch.Generator().manual_seed(seed)
    problems = splits_for(cfg)["train"][: len(LENGTHS)]
    prompt_ids = torch.tensor([tok.encode(p.prompt) for p in problems])
    width = max(LENGTHS)
    mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    completion_ids = torch.randint(3, len(tok), (len(LENGTHS), width), generator=gen) * mask
    adv = torch.randn(len(LENGTHS), generator=gen)
    adv[1] = 0.0
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
              "completion_mask": mask, "advantages": adv}
    if old:
        # behavior log-probs: some well below and some above any current log-prob, so that r spans both sides of 1
        inputs["old_per_token_logps"] = -3.0 + spread * torch.randn(len(LENGTHS), width, generator=gen)
    return inputs


def _loss_and_grads(trainer, inputs):
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, {k: v.clone() for k, v in inputs.items()})
    loss.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in trainer.model.parameters() if p.grad is not None])
    return loss.detach(), grads


@pytest.mark.parametrize("level", ["token", "sequence"])
# Catches: the wrapper changing what TRL computes (the captured log-probs handed back to the loss detached, a loss
# re-implemented beside TRL's, a second normalisation), or TRL's own trainer given the sapo/ keys.
def test_loss_and_gradient_are_trls(level, tmp_path):
    cfg = micro(**{"loss.loss_type": "sapo", "loss.importance_sampling_level": level})
    tok = build_char_tokenizer()
    model = build_model("cpu-micro", seed=0).double()
    plain = _trainer(trl.GRPOTrainer, cfg, copy.deepcopy(model), tok, tmp_path)
    wrapped = _trainer(sapo_diagnostics_trainer(), cfg, model, tok, tmp_path)
    inputs = _inputs(cfg, tok)
    loss, grads = _loss_and_grads(plain, inputs)
    loss_w, grads_w = _loss_and_grads(wrapped, inputs)
    assert float(grads.abs().max()) > 1e-3  # a real gradient
    assert torch.equal(loss, loss_w) and torch.equal(grads, grads_w)
    assert not any(k.startswith("sapo/") for k in plain._metrics["train"])
    assert sorted(k for k in wrapped._metrics["train"] if k.startswith("sapo/")) == sorted(NAMES.values())


def reference_statistics(logp, old, adv, mask, tau_pos, tau_neg, level):
    """The statistics written out with plain torch: r, w(r) = sech²(τ(r - 1)/2), α = 1/len per response."""
    m = mask.bool()
    z = (logp - old) * m
    if level == "sequence":
        z = (z.sum(-1, keepdim=True) / m.sum(-1, keepdim=True)).expand_as(z)
    r = torch.exp(z)
    a = adv[:, None].expand_as(z)
    tau = torch.where(a > 0, torch.tensor(tau_pos), torch.tensor(tau_neg))
    w = 1.0 / torch.cosh(tau * (r - 1.0) / 2.0) ** 2
    alpha = (1.0 / m.sum(-1, keepdim=True)).expand_as(z)
    signed = m & (a != 0)  # the tokens that carry a gradient
    signal = (alpha * a.abs() * r)[signed]
    removed = float((signal * (1.0 - w[signed])).sum() / signal.sum())
    ratio = r[signed].sort().values

    def quantile(q):  # linear interpolation between order statistics
        pos = q * (ratio.numel() - 1)
        lo = int(pos)
        hi = min(lo + 1, ratio.numel() - 1)
        return float(ratio[lo] + (pos - lo) * (ratio[hi] - ratio[lo]))

    return {NAMES["ratio_q01"]: quantile(0.01), NAMES["ratio_q99"]: quantile(0.99),
            NAMES["max_abs_log_ratio"]: float(z[signed].abs().max()), NAMES["gate_weight_mean"]: float(w[signed].mean()),
            NAMES["signal_removed"]: removed}


@pytest.mark.parametrize("level", ["token", "sequence"])
# Catches: the gate's temperature chosen by the wrong sign, the weights of the per-response mean left out, padding
# or zero-advantage tokens counted, the sequence level read per token, or what the trainer logs differing from what
# the function computes.
def test_statistics_match_the_formulas(level, tmp_path):
    cfg = micro(**{"loss.loss_type": "sapo", "loss.importance_sampling_level": level,
                   "loss.sapo_temperature_pos": 2.0, "loss.sapo_temperature_neg": 0.5})
    tok = build_char_tokenizer()
    trainer = _trainer(sapo_diagnostics_trainer(), cfg, build_model("cpu-micro", seed=0).double(), tok, tmp_path)
    inputs = _inputs(cfg, tok, seed=1)
    trainer._compute_loss(trainer.model, inputs)
    with torch.no_grad():
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        logp = trainer._get_per_token_logps_and_entropies(trainer.model, ids, att, ids.size(1) - inputs["prompt_ids"]
                                                          .size(1))[0]
    expected = reference_statistics(logp, inputs["old_per_token_logps"], inputs["advantages"],
                                     inputs["completion_mask"], 2.0, 0.5, level)
    assert 0.05 < expected[NAMES["signal_removed"]] < 0.95  # the gate removes some signal, not all
    got = gate_statistics(logp, inputs["old_per_token_logps"], inputs["advantages"], inputs["completion_mask"],
                          tau_pos=2.0, tau_neg=0.5, level=level)
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("sapo/")}
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
        assert logged[name] == got[name], name


# Catches: an on-policy batch (TRL passes no old log-probs when num_iterations = 1) read as anything but r = 1.
def test_on_policy_batch_reads_ratio_one(tmp_path):
    cfg = micro(**{"loss.loss_type": "sapo"})
    tok = build_char_tokenizer()
    trainer = _trainer(sapo_diagnostics_trainer(), cfg, build_model("cpu-micro", seed=0).double(), tok, tmp_path)
    trainer._compute_loss(trainer.model, _inputs(cfg, tok, old=False))
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith("sapo/")}
    assert logged == {NAMES["ratio_q01"]: 1.0, NAMES["ratio_q99"]: 1.0, NAMES["max_abs_log_ratio"]: 0.0,
                      NAMES["gate_weight_mean"]: 1.0, NAMES["signal_removed"]: 0.0}


# Catches: the diagnostics trainer accepted for another loss, logging SAPO's gate for a loss that has none.
def test_other_loss_types_are_refused(tmp_path):
    cfg = micro(**{"loss.loss_type": "grpo"})
    with pytest.raises(ValueError, match="loss_type is 'grpo'"):
        _trainer(sapo_diagnostics_trainer(), cfg, build_model("cpu-micro", seed=0), build_char_tokenizer(), tmp_path)


def _doctor(run):
    proc = subprocess.run([sys.executable, "-m", "sapo_lab", "doctor", run, "--no-map"], capture_output=True,
                          text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.slow
# Catches: export's run not using the diagnostics (or not writing trainer_state.json where the doctor looks), the
# diagnostics' names not the ones the doctor reads, and a run without them given a regime.
def test_a_real_trl_run_read_by_the_doctor(tmp_path, monkeypatch):
    from _micro import parity_reward

    from sapo_lab.integrations.trl_export import run_trl
    from sapo_lab.tasks.addition import AdditionTask

    # the untrained micro model never answers right: a reward that varies within groups makes updates happen
    monkeypatch.setattr(AdditionTask, "verify", lambda self, text, finished, problem: parity_reward(text, finished,
                                                                                                   problem))

    model_dir = str(tmp_path / "model")
    build_model("cpu-micro", seed=0).save_pretrained(model_dir)
    build_char_tokenizer().save_pretrained(model_dir)
    torch.set_default_dtype(torch.float32)
    lines = {}
    for loss_type in ("sapo", "grpo"):
        run = str(tmp_path / loss_type)
        cfg = micro(threads=1, **{"loss.loss_type": loss_type, "optimization.max_steps": 3})
        run_trl(cfg, model_dir, run, log=lambda message: None)
        with open(os.path.join(run, "trainer_state.json")) as f:
            history = json.load(f)["log_history"]
        has = [any(k.startswith("sapo/") for k in row) for row in history if "loss" in row]
        assert has and all(has) == (loss_type == "sapo") and any(has) == (loss_type == "sapo")
        lines[loss_type] = _doctor(run)
    assert lines["sapo"][0].split(";")[0] in ("verdict: gate active", "verdict: gate inert"), lines["sapo"]
    assert "trl run (its log states no settings); 3 logged steps)" in "\n".join(lines["sapo"])
    assert lines["grpo"][0].startswith("verdict: ratio not logged"), lines["grpo"]
