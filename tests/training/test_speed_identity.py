"""The fast paths of the non-model work give the values of the plain computations they replace, bit for bit.

The loss statistics, the rollout's scoring and the minibatch selection were rewritten for speed
(fewer small kernels per step); committed studies must replay exactly, so each rewrite is checked
here against the straightforward computation: ``torch.quantile``, boolean-mask indexing, one
``decode`` per response.
"""

from __future__ import annotations

import json

import pytest
import torch
from _batches import random_batch

from sapo_lab import mask_from_lengths
from sapo_lab.objective.fast_paths import quantile_stats
from sapo_lab.objective.losses import policy_loss, signal_removed_split
from sapo_lab.objective.registry import kernel_for
from sapo_lab.tasks import Problem
from sapo_lab.training.rollout import MiniBatch, score_completions
from sapo_lab.training.tokenizer import build_char_tokenizer
from sapo_lab.training.update import zero_advantage_scale

QUANTILE_SETS = ((0.05, 0.5, 0.95), (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99), (0.5, 0.9))


def _same(a: dict, b: dict) -> bool:
    """Equal keys in the same order and bit-equal values (NaN equals NaN)."""
    return list(a) == list(b) and json.dumps(a) == json.dumps(b)


def _values(kind: int, n: int, g: torch.Generator) -> torch.Tensor:
    if kind == 0:
        return torch.randn(n, generator=g, dtype=torch.float64)
    if kind == 1:  # many ties
        return torch.randint(0, 3, (n,), generator=g).double()
    if kind == 2:  # ratios over a huge range, some overflowing to inf
        return torch.exp(40 * torch.randn(n, generator=g, dtype=torch.float64))
    if kind == 3:  # float32 input (converted to float64 inside)
        return torch.rand(n, generator=g)
    v = torch.randn(n, generator=g, dtype=torch.float64)
    v[0], v[-1] = float("inf"), float("-inf")
    return v


def test_quantile_stats_equal_torch_quantile_bit_for_bit():
    """Catches: an interpolation written out by hand (a + (b - a) w rounds differently from lerp's two-sided
    formula), a rank rounded instead of truncated, an off-by-one rank (q n instead of q (n - 1)), and a cached
    rank table reused for a tensor of another length."""
    g = torch.Generator().manual_seed(0)
    for trial in range(1500):
        n = 1 + trial % 7 if trial < 200 else int(torch.randint(1, 500, (1,), generator=g))  # tiny sets first
        values = _values(trial % 5, n, g)
        qs = QUANTILE_SETS[trial % 3]
        expected = torch.quantile(values.double(), torch.tensor(qs, dtype=torch.float64)).tolist()
        got = quantile_stats(values, "x", qs)
        assert json.dumps(list(got.values())) == json.dumps(expected), (trial, n, got, expected)


def test_quantile_stats_nan_and_empty():
    """Catches: a NaN that the fast path interpolates past (torch makes every quantile NaN), and an empty
    set that raises instead of reporting the ``empty`` value."""
    got = quantile_stats(torch.tensor([1.0, float("nan"), 2.0]), "r")
    assert all(v != v for v in got.values()) and list(got) == ["r_q05", "r_q50", "r_q95"]
    assert quantile_stats(torch.zeros(0), "r", (0.5, 0.9), empty=None) == {"r_q50": None, "r_q90": None}


def _reference_stats(logp, behavior, adv, mask, loss_type, level):
    """The loss statistics computed the plain way: boolean-mask indexing and torch.quantile (no skipped tokens)."""
    kernel = kernel_for(loss_type)
    logp = logp.detach()
    valid = mask.bool()
    token_z = torch.where(valid, logp - behavior, torch.zeros_like(logp))
    lengths = valid.sum(-1)
    if level == "sequence":
        seq = token_z.sum(-1) / lengths.clamp(min=1).to(logp.dtype)
        z = torch.where(valid, seq[:, None].expand_as(token_z), torch.zeros_like(token_z))
    else:
        z = token_z
    a_tok = adv.to(logp.dtype)[:, None].expand_as(z)
    _, state = kernel.token_surrogate(z, a_tok, 1.0, 1.05) if not kernel.hard_clip else kernel.token_surrogate(
        z, a_tok, 0.2, 0.2)
    from sapo_lab.objective.masks import aggregation_weights

    weight = aggregation_weights(valid, "per_response", dtype=logp.dtype)
    zd, a = z.double()[valid], a_tok.double()[valid]
    st = state[valid]
    log_gate, log_coef = kernel.log_weights(zd, a, st.double() if st.is_floating_point() else st)
    signed = a != 0
    removed = 0.0
    if bool(signed.any()):
        log_mass = torch.log(weight.double()[valid][signed] * a[signed].abs()) + zd[signed]
        removed = float((torch.softmax(log_mass, 0) * (1.0 - torch.exp(log_gate[signed]))).sum())
    tz = token_z.double()[valid]
    q = torch.tensor((0.05, 0.5, 0.95), dtype=torch.float64)
    out = {
        "tokens_pos": int((a > 0).sum()), "tokens_neg": int((a < 0).sum()), "tokens_zero": int((a == 0).sum()),
        "max_abs_log_ratio": float(tz.abs().max()), "signal_removed_frac": removed,
        "approx_kl": float((torch.expm1(tz) - tz).mean()),
        "ratio": torch.quantile(torch.exp(zd), q).tolist(), "coef": torch.quantile(torch.exp(log_coef), q).tolist(),
    }
    if kernel.hard_clip:
        out["clip_frac"] = float(((log_gate == float("-inf")) & signed).double().mean())
    return out, (zd, a, weight.double()[valid], log_gate)


@pytest.mark.parametrize("loss_type, level", [("sapo", "token"), ("grpo", "token"), ("gspo", "sequence"),
                                               ("sapo_directional", "token"), ("gauss", "sequence")])
def test_loss_statistics_equal_the_boolean_mask_computation(loss_type, level):
    """Catches: gathering tokens in another order than boolean indexing (the softmax's and the quantiles' sums
    then round differently), the overall removed fraction taken over the wrong tokens, ``tokens_zero`` counted as
    something other than the rest of the used tokens, and the signal split's cells built from the wrong side."""
    g = torch.Generator().manual_seed(1)
    for trial in range(40):
        n, t = 3 + trial % 9, 1 + trial % 7
        logp, behavior, adv, mask = random_batch(n, t, spread=(0.05, 0.5, 3.0)[trial % 3], seed=trial)
        if trial % 2:
            logp, behavior = logp.detach().double(), behavior.double()
        adv[torch.rand(n, generator=g) < 0.3] = 0.0
        if trial % 4 == 1:
            adv = adv.round()  # ties between advantages
        if trial % 10 == 0:
            adv.zero_()
        stats = policy_loss(logp, behavior, adv, mask, loss_type=loss_type, importance_sampling_level=level).stats
        expected, split_args = _reference_stats(logp, behavior, adv, mask, loss_type, level)
        got = {k: stats[k] for k in expected if k not in ("ratio", "coef")}
        got["ratio"] = [stats[f"ratio_q{p}"] for p in ("05", "50", "95")]
        got["coef"] = [stats[f"coef_q{p}"] for p in ("05", "50", "95")]
        assert json.dumps(got) == json.dumps({k: expected[k] for k in got}), (trial, got, expected)
        split = {k: v for k, v in stats.items() if k.startswith(("signal_removed_frac_", "signal_share_"))}
        assert _same(split, _reference_split(*split_args)), trial
        assert _same(signal_removed_split(*split_args), _reference_split(*split_args)), trial


def _reference_split(z, a, w, lg) -> dict:
    """signal_removed_split's cells, by boolean-mask indexing."""
    out = {}
    signed = a != 0
    if not bool(signed.any()):
        for sign in ("pos", "neg"):
            for side in ("below", "above"):
                out[f"signal_removed_frac_{sign}_{side}"] = float("nan")
                out[f"signal_share_{sign}_{side}"] = 0.0
        out["signal_removed_frac_pos"] = out["signal_removed_frac_neg"] = float("nan")
        return out
    z, a, lg = z[signed], a[signed], lg[signed]
    log_mass = torch.log(w[signed] * a.abs()) + z
    lost = 1.0 - torch.exp(lg)
    share = torch.softmax(log_mass, 0)

    def removed(cell):
        return float((torch.softmax(log_mass[cell], 0) * lost[cell]).sum()) if bool(cell.any()) else float("nan")

    for sign, sc in (("pos", a > 0), ("neg", a < 0)):
        out[f"signal_removed_frac_{sign}"] = removed(sc)
        for side, cell in (("below", sc & (z < 0)), ("above", sc & (z > 0))):
            out[f"signal_removed_frac_{sign}_{side}"] = removed(cell)
            out[f"signal_share_{sign}_{side}"] = float(share[cell].sum())
    return out


class _CountingTokenizer:
    """The character tokenizer, counting its decode calls."""

    def __init__(self):
        self.inner, self.calls = build_char_tokenizer(), 0

    def decode(self, ids, **kwargs):
        self.calls += 1
        return self.inner.decode(ids, **kwargs)


def test_scoring_decodes_each_distinct_text_once_and_matches_per_row_decoding():
    """Catches: a decode cache keyed on the row with its EOS (an unfinished response then gets a finished one's
    text or the reverse), one that drops special tokens (a sampled <unk> must stay in the text), and a cache
    that does not save the repeated decodes it exists for."""
    tok = _CountingTokenizer()
    eos, unk = tok.inner.eos_token_id, tok.inner.unk_token_id
    d = {c: tok.inner.convert_tokens_to_ids(c) for c in "0123"}
    rows = [[d["1"], d["2"], eos], [d["1"], d["2"], eos], [d["1"], d["2"], d["3"]], [d["1"], unk, eos],
            [d["1"], d["2"], eos], [eos, 0, 0]]
    finished = [True, True, False, True, True, True]
    lengths = [3, 3, 3, 3, 3, 1]
    ids = torch.tensor(rows)
    mask = (torch.arange(3)[None] < torch.tensor(lengths)[:, None]).long()
    problem = Problem(prompt="1+2=", answer="3", difficulty=0)
    seen = []

    def reward(text, fin, p):
        seen.append((text, fin))
        return 0.0, "ok"

    episodes = score_completions(tok, [problem] * 6, ids, mask, torch.tensor(finished), reward, group_size=3)
    plain = [tok.inner.decode(r[: n - 1] if f else r[:n], skip_special_tokens=False)
             for r, n, f in zip(rows, lengths, finished, strict=True)]
    assert [e.completion for e in episodes] == plain == [t for t, _ in seen]
    assert plain[3] == "1<unk>" and plain[5] == "" and plain[2] == "123"
    assert tok.calls == 4  # "12", "123", "1<unk>", ""
    assert [e.completion_ids for e in episodes][5] == [eos] and [e.group for e in episodes] == [0, 0, 0, 1, 1, 1]


def test_minibatch_selection_by_mask_equals_selection_by_index():
    """Catches: a boolean selection turned into indices in another order, or a field left unselected."""
    g = torch.Generator().manual_seed(2)
    n, t = 7, 4
    mb = MiniBatch(input_ids=torch.randint(0, 9, (n, t + 2), generator=g), attention_mask=torch.ones(n, t + 2),
                   response_mask=torch.ones(n, t + 2), behavior_logp=torch.randn(n, t, generator=g),
                   advantages=torch.tensor([0.0, 1.0, 0.0, -2.0, 3.0, 0.0, 0.5]), ref_logp=torch.randn(n, t, generator=g))
    keep = mb.advantages != 0
    by_mask, by_index = mb.select(keep), mb.select(torch.tensor([1, 3, 4, 6]))
    for name in ("input_ids", "attention_mask", "response_mask", "behavior_logp", "advantages", "ref_logp"):
        assert torch.equal(getattr(by_mask, name), getattr(mb, name)[keep]), name
        assert torch.equal(getattr(by_index, name), getattr(mb, name)[keep]), name
    cm = mb.completion_mask
    cm[1, 2:] = 0
    for aggregation, expected in (("per_response", 4 / 7), ("token_pool", float(cm[keep].sum()) / float(cm.sum()))):
        assert zero_advantage_scale(mb, keep, aggregation) == expected
        assert zero_advantage_scale(mb, keep.nonzero().squeeze(1), aggregation) == expected


def test_kernel_settings_are_refused_on_every_call_not_only_the_first():
    """Catches: a settings cache that remembers a refusal's arguments as checked (the second call with
    tau_pos = 0 would then train), or one that skips the check for tensors it cannot remember."""
    logp, behavior, adv, mask = random_batch(3, 4)
    for _ in range(2):
        with pytest.raises(ValueError, match="temperature"):
            policy_loss(logp, behavior, adv, mask, tau_pos=0.0)
        with pytest.raises(ValueError, match="temperature"):
            policy_loss(logp, behavior, adv, mask, tau_neg=torch.tensor(-1.0))
        with pytest.raises(ValueError, match="clip epsilons"):
            policy_loss(logp, behavior, adv, mask, loss_type="grpo", clip_eps_low=1.5)
    policy_loss(logp, behavior, adv, mask, tau_pos=2.0)  # a good setting still passes


def test_training_forward_puts_every_module_in_training_mode(tmp_path):
    """Catches: deciding the mode from the root module alone (a submodule left in eval mode, e.g. by a
    caller's hook, would then run the training forward without dropout)."""
    from _micro import QUIET, micro, parity_reward

    from sapo_lab.training.device import ModelTimer
    from sapo_lab.training.trainer import Trainer
    from sapo_lab.training.update import minibatch_forward

    trainer = Trainer(micro(), str(tmp_path / "run"), reward_fn=parity_reward, **QUIET).start()
    batch = trainer.collect_rollout(ModelTimer(trainer.device))
    (mb,) = batch.minibatches(1)
    trainer.model.train()
    inner = [m for m in trainer.model.modules() if m is not trainer.model][-1]
    inner.eval()
    minibatch_forward(trainer.model, mb, trainer.cfg, timer=ModelTimer(trainer.device), where="test")
    assert all(m.training for m in trainer.model.modules())


def test_finite_inputs_whose_sum_overflows_are_accepted_and_a_nan_is_still_found():
    """Catches: a finiteness check decided by the sum alone (finite float32 log-probs whose sum overflows would be
    refused), and a fast path that lets a NaN or inf at a valid token through."""
    from sapo_lab.errors import NonFiniteError

    logp, behavior, adv, mask = random_batch(3, 4, lengths=[4, 4, 4])
    big = torch.full((3, 4), -3e38)  # finite in float32; the sum is -inf
    out = policy_loss(big, big, adv, mask)
    assert torch.isfinite(out.loss)
    policy_loss(logp, behavior, torch.full((3,), 3e38), mask)  # advantages: finite, their sum overflows
    for bad in (float("nan"), float("inf")):
        poisoned = behavior.clone()
        poisoned[1, 2] = bad
        with pytest.raises(NonFiniteError, match=r"behavior_logp .* \[\(1, 2\)\]"):
            policy_loss(logp, poisoned, adv, mask)
        with pytest.raises(NonFiniteError, match="advantages"):
            policy_loss(logp, behavior, torch.tensor([0.0, bad, 1.0]), mask)
    short = mask_from_lengths([4, 2, 4], 4)
    padded = behavior.clone()
    padded[1, 3] = float("nan")  # padding: not a valid token, allowed
    policy_loss(logp, padded, adv, short)
