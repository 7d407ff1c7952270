"""The CS336 assignment 5 adapters (assignment/cs336_adapters.py for the 2026 edition, cs336_adapters_2025.py for
2025) drop into that course's tests: every adapter name of each edition is defined; the snapshot tests whose
definitions the SAPO assignment or sapo_lab shares pass on a re-creation of them; the ``"sapo"`` branch is the
student's ``sapo_loss``; the group normalisation offers both standard deviations; the rest is the course's own.

The re-creation: the course's snapshot tests build their inputs from fixed seeds (42) and shapes (responses of
10 tokens, a batch of 2, logits over 100 tokens, 8 responses of 4 per group rewarded by a hash of the text) and
compare each adapter's output with a stored array. Nothing of the course's code or arrays is copied here (its
repository states no licence): the inputs are built the same way, and each expected value is computed in this
file from the handout's definition. Set CS336_A5_DIR (2026) or CS336_A5_2025_DIR to a checkout of the course's
repository to also compare with its stored arrays, within its own tolerance (rtol 1e-4, atol 1e-2).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "tests" / "course" / "assignment_modules"
CORRECT = MODULES / "from_handout.py"
EDITIONS = {"2026": ROOT / "assignment" / "cs336_adapters.py", "2025": ROOT / "assignment" / "cs336_adapters_2025.py"}
# Every adapter of each edition's tests/adapters.py, as its published interface names them.
NAMES = {
    "2026": {"run_tokenize_prompt_and_output", "run_get_response_log_probs", "run_compute_rollout_rewards",
             "run_compute_group_normalized_rewards", "run_compute_policy_gradient_loss",
             "run_aggregate_loss_across_microbatch", "run_grpo_train_step", "get_packed_sft_dataset",
             "run_iterate_batches", "run_parse_mmlu_response", "run_parse_gsm8k_response",
             "run_compute_per_instance_dpo_loss"},
    "2025": {"run_tokenize_prompt_and_output", "run_compute_group_normalized_rewards", "run_compute_entropy",
             "run_get_response_log_probs", "run_compute_naive_policy_gradient_loss", "run_compute_grpo_clip_loss",
             "run_compute_policy_gradient_loss", "run_masked_mean", "run_sft_microbatch_train_step",
             "run_grpo_microbatch_train_step", "run_masked_normalize", "get_packed_sft_dataset",
             "run_iterate_batches", "run_parse_mmlu_response", "run_parse_gsm8k_response",
             "run_compute_per_instance_dpo_loss"},
}
TIGHT = {"rtol": 1e-6, "atol": 1e-6}  # float32 inputs; far inside the course's own atol of 1e-2


def load(monkeypatch, edition: str, student: Path = CORRECT, course: Path | None = None):
    monkeypatch.setenv("SAPO_ASSIGNMENT", str(student))
    if course is None:
        monkeypatch.delenv("CS336_COURSE_ADAPTERS", raising=False)
    else:
        monkeypatch.setenv("CS336_COURSE_ADAPTERS", str(course))
    monkeypatch.syspath_prepend(str(MODULES))
    spec = importlib.util.spec_from_file_location(f"cs336_adapters_{edition}", EDITIONS[edition])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the course's inputs, built as its fixtures build them ----------------------------------------------------
def seeded(make):
    torch.manual_seed(42)
    return make()


def inputs() -> dict:
    rewards = seeded(lambda: torch.rand(2, 1))
    logp = seeded(lambda: torch.randn(2, 10))
    old = seeded(lambda: logp + torch.randn_like(logp))
    logits = seeded(lambda: torch.randn(2, 10, 100))
    return {"rewards": rewards, "advantages": rewards - rewards.mean(0), "logp": logp, "old": old,
            "response_mask": seeded(lambda: torch.rand_like(logp) > 0.5), "logits": logits,
            "mask": seeded(lambda: torch.rand_like(logits) > 0.5)}


def hashed_reward(response: str, truth: str) -> dict:
    reward = (int(hashlib.sha256(response.encode()).hexdigest(), 16) % 10) / 10.0
    return {"reward": reward, "format_reward": reward, "answer_reward": reward}


RESPONSES = [f"hmm I think ths answer is {i}" for i in range(8)]


# ---- the handout's definitions, written out ---------------------------------------------------------------
def sample_std_advantages(flat, group_size, eps=1e-6):
    groups = flat.reshape(-1, group_size).double()
    centred = groups - groups.mean(1, keepdim=True)
    sample_std = (centred.pow(2).sum(1, keepdim=True) / (group_size - 1)).sqrt()
    return (centred / (sample_std + eps)).reshape(-1)


def clipped(ratio, adv, eps):
    return -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)


def close(got, want, **tol):
    return torch.allclose(got.double(), want.double(), **(tol or TIGHT), equal_nan=True)


@pytest.mark.parametrize("edition", EDITIONS)
def test_every_adapter_name_of_the_edition_is_defined(monkeypatch, edition):
    # catches: a name of the course's tests/adapters.py missing, so its test modules fail at import
    adapters = load(monkeypatch, edition)
    missing = {n for n in NAMES[edition] if not callable(getattr(adapters, n, None))}
    assert not missing, missing


def test_the_2026_snapshot_tests_pass_where_the_definitions_agree(monkeypatch):
    # catches: a method computed off the course's definition (clip on the wrong side, GSPO's ratio averaged over
    # padding or written only on response tokens, the sequence aggregation pooling tokens, the sample std lost)
    a = load(monkeypatch, "2026")
    x = inputs()
    adv, _ = a.run_compute_group_normalized_rewards(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=2,
                                                    baseline="mean", advantage_eps=1e-6, advantage_normalizer="std")
    assert close(adv, sample_std_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), 2))
    A, logp, old, m = x["rewards"], x["logp"], x["old"], x["response_mask"]
    on, _ = a.run_compute_policy_gradient_loss(A, logp, importance_reweighting_method="none")
    assert close(on, -A * logp)
    noclip, _ = a.run_compute_policy_gradient_loss(A, logp, "noclip", old_log_probs=old)
    assert close(noclip, -A * torch.exp(logp - old))
    grpo, _ = a.run_compute_policy_gradient_loss(A, logp, "grpo", old_log_probs=old, cliprange=0.1)
    assert close(grpo, clipped(torch.exp(logp - old), A, 0.1))
    gspo, _ = a.run_compute_policy_gradient_loss(A, logp, "gspo", old_log_probs=old, cliprange=0.1,
                                                 response_mask=m)
    mf = m.float()
    sequence = torch.exp(((logp - old) * mf).sum(1, keepdim=True) / mf.sum(1, keepdim=True))
    assert close(gspo, clipped(sequence, A, 0.1).expand(2, 10))
    by_sequence = a.run_aggregate_loss_across_microbatch(logp, m, loss_normalization="sequence")
    assert close(by_sequence, ((logp * mf).sum(1) / mf.sum(1)).mean())
    constant = a.run_aggregate_loss_across_microbatch(logp, m, "constant", normalization_constant=42)
    assert close(constant, (logp * mf).sum() / 42)


def test_the_2025_snapshot_tests_pass_where_the_definitions_agree(monkeypatch):
    # catches: rewards scored in another order, the naive loss on advantages, a cliprange of 10 refused (sapo_lab
    # requires eps_low < 1; CS336's test uses 10), a masked mean counting masked-out elements
    a = load(monkeypatch, "2025")
    x = inputs()
    normalized, raw, _ = a.run_compute_group_normalized_rewards(
        reward_fn=hashed_reward, rollout_responses=RESPONSES, repeated_ground_truths=["42"] * 8, group_size=4,
        advantage_eps=1e-6, normalize_by_std=True)
    want_raw = torch.tensor([hashed_reward(r, "42")["reward"] for r in RESPONSES])
    assert close(raw, want_raw) and close(normalized, sample_std_advantages(want_raw, 4))
    R, A, logp, old = x["rewards"], x["advantages"], x["logp"], x["old"]
    assert close(a.run_compute_naive_policy_gradient_loss(R, logp), -R * logp)
    for eps in (10.0, 0.1):
        got, _ = a.run_compute_grpo_clip_loss(A, logp, old, cliprange=eps)
        assert close(got, clipped(torch.exp(logp - old), A, eps)), eps
    want = {"no_baseline": -R * logp, "reinforce_with_baseline": -A * logp,
            "grpo_clip": clipped(torch.exp(logp - old), A, 0.5)}
    for loss_type, expected in want.items():
        got, _ = a.run_compute_policy_gradient_loss(logp, loss_type, raw_rewards=R, advantages=A,
                                                    old_log_probs=old, cliprange=0.5)
        assert close(got, expected), loss_type
    logits, mask = x["logits"], x["mask"]
    mf = mask.float()
    for dim in (0, 1, None, -1):
        expected = (logits * mf).sum() / mf.sum() if dim is None else (logits * mf).sum(dim) / mf.sum(dim)
        assert close(a.run_masked_mean(logits, mask, dim), expected), dim


@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("group_size", [2, 4])
def test_the_group_normalisation_offers_both_standard_deviations(monkeypatch, edition, group_size):
    # catches: one convention served under both names, the sample one off by its sqrt(G/(G-1)) or with eps
    # rescaled, or the default not the course's (sample) one its snapshot expects
    a = load(monkeypatch, edition)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 0.0, 0.0, 1.0, 0.75], dtype=torch.float64)
    centred = rewards.reshape(-1, group_size) - rewards.reshape(-1, group_size).mean(1, keepdim=True)
    texts = [str(i) for i in range(8)]
    by_text = {t: {"reward": float(r)} for t, r in zip(texts, rewards, strict=True)}

    def call(**std):
        if edition == "2026":
            return a.run_compute_group_normalized_rewards(rewards, group_size, advantage_eps=1e-6, **std)[0]
        return a.run_compute_group_normalized_rewards(lambda t, _: by_text[t], texts, ["x"] * 8, group_size, 1e-6,
                                                      True, **std)[0]

    for std, divisor in (("population", group_size), ("sample", group_size - 1)):
        spread = (centred.pow(2).sum(1, keepdim=True) / divisor).sqrt()
        tol = {"rtol": 1e-12, "atol": 1e-12} if edition == "2026" else TIGHT  # 2025 builds float32 rewards itself
        assert close(call(std=std), (centred / (spread + 1e-6)).reshape(-1), **tol), std
    assert torch.equal(call(), call(std="sample"))


@pytest.mark.parametrize("edition", EDITIONS)
def test_the_sapo_branch_is_the_students_sapo_loss(monkeypatch, edition):
    # catches: the adapter computing the temperature choice itself (a student's swapped temperatures unseen)
    a = load(monkeypatch, edition, MODULES / "wrong_swapped_temperatures.py")
    logp = torch.full((2, 1), -1.0, dtype=torch.float64)
    old = torch.full((2, 1), -1.5, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    if edition == "2026":
        per_token, _ = a.run_compute_policy_gradient_loss(adv, logp, "sapo", old, tau_pos=1.0, tau_neg=3.0)
    else:
        per_token, _ = a.run_compute_policy_gradient_loss(logp, "sapo", advantages=adv, old_log_probs=old,
                                                          tau_pos=1.0, tau_neg=3.0)
    r = math.exp(0.5)
    right = [-(4 / 1.0) / (1 + math.exp(-1.0 * (r - 1))), (4 / 3.0) / (1 + math.exp(-3.0 * (r - 1)))]
    swapped = [-(4 / 3.0) / (1 + math.exp(-3.0 * (r - 1))), (4 / 1.0) / (1 + math.exp(-1.0 * (r - 1)))]
    assert torch.allclose(per_token.reshape(-1), torch.tensor(swapped, dtype=torch.float64))
    assert not torch.allclose(per_token.reshape(-1), torch.tensor(right, dtype=torch.float64))


def test_the_sapo_branch_aggregated_has_sapo_labs_gradient(monkeypatch):
    # catches: the per-token sapo values right but their gradient lost (a detached per-token loss), or the
    # sequence aggregation weighting tokens differently from sapo_lab's per-response mean
    import sapo_lab

    a = load(monkeypatch, "2026")
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (12,), generator=gen).double()
    adv, _ = a.run_compute_group_normalized_rewards(rewards, 4, std="population")
    assert torch.allclose(adv, sapo_lab.group_advantages(rewards.reshape(3, 4)).reshape(-1))
    logp = (-1.0 + 0.3 * torch.randn(12, 5, generator=gen, dtype=torch.float64)).requires_grad_(True)
    old = logp.detach() + 0.2 * torch.randn(12, 5, generator=gen, dtype=torch.float64)
    mask = (torch.arange(5)[None, :] < torch.randint(1, 6, (12,), generator=gen)[:, None]).double()
    per_token, _ = a.run_compute_policy_gradient_loss(adv[:, None], logp, "sapo", old, response_mask=mask)
    loss = a.run_aggregate_loss_across_microbatch(per_token, mask, "sequence")
    (ours,) = torch.autograd.grad(loss, logp)
    (lib,) = torch.autograd.grad(sapo_lab.policy_loss(logp, old, adv, mask, loss_type="sapo").loss, logp)
    assert torch.allclose(ours, lib, atol=1e-12)


COURSE = '''
import torch
calls = []

def run_compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths):
    calls.append("rollout")
    return torch.tensor([7.0]), {"from": "course"}

def run_compute_policy_gradient_loss(a, logp, method="none", old=None, cliprange=None, response_mask=None):
    calls.append(method)
    return torch.full_like(logp, 7.0), {"from": "course"}

def run_compute_entropy(logits):
    return torch.full(logits.shape[:-1], 7.0)
'''


@pytest.mark.parametrize("edition, name, args", [
    ("2026", "run_compute_rollout_rewards", (hashed_reward, ["a"], ["b"])),
    ("2025", "run_compute_entropy", (torch.zeros(2, 3, 4),)),
])
def test_the_other_adapters_are_the_courses_own(monkeypatch, tmp_path, edition, name, args):
    # catches: an adapter the SAPO assignment does not define answering with something of its own (or failing
    # silently) instead of the course's code, or a refusal that does not say how to supply it
    a = load(monkeypatch, edition)
    with pytest.raises(NotImplementedError, match="CS336_COURSE_ADAPTERS"):
        getattr(a, name)(*args)
    (tmp_path / "course_adapters.py").write_text(COURSE)
    a = load(monkeypatch, edition, course=tmp_path / "course_adapters.py")
    out = getattr(a, name)(*args)
    assert float((out[0] if isinstance(out, tuple) else out).reshape(-1)[0]) == 7.0


def test_with_the_courses_adapters_only_sapo_is_the_students(monkeypatch, tmp_path):
    # catches: the course's method answered by sapo_lab when the course supplies its own, or "sapo" sent to the
    # course (which has none)
    (tmp_path / "course_adapters.py").write_text(COURSE)
    a = load(monkeypatch, "2026", course=tmp_path / "course_adapters.py")
    logp, old = torch.zeros(2, 3, dtype=torch.float64), torch.full((2, 3), -0.1, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    grpo, meta = a.run_compute_policy_gradient_loss(adv, logp, "grpo", old, 0.2)
    assert meta == {"from": "course"} and torch.all(grpo == 7.0)
    sapo, _ = a.run_compute_policy_gradient_loss(adv, logp, "sapo", old)
    assert not torch.any(sapo == 7.0)


SNAPSHOTS = {"2026": os.environ.get("CS336_A5_DIR"), "2025": os.environ.get("CS336_A5_2025_DIR")}


@pytest.mark.parametrize("edition", EDITIONS)
def test_the_courses_stored_arrays_when_a_checkout_is_given(monkeypatch, edition):
    # catches: a difference between the definitions written out above and the course's stored arrays
    if not SNAPSHOTS[edition]:
        pytest.skip(f"no checkout of the course's {edition} repository given")
    np = pytest.importorskip("numpy")
    folder = Path(SNAPSHOTS[edition]) / "tests" / "_snapshots"
    a = load(monkeypatch, edition)
    x = inputs()
    R, logp, old = x["rewards"], x["logp"], x["old"]
    if edition == "2026":
        got = {"test_compute_policy_gradient_loss_on_policy": {"array": a.run_compute_policy_gradient_loss(R, logp)[0]},
               "test_compute_policy_gradient_loss_off_policy_gspo": {"array": a.run_compute_policy_gradient_loss(
                   R, logp, "gspo", old, 0.1, x["response_mask"])[0]},
               "test_aggregate_loss_across_microbatch_sequence": {
                   "array": a.run_aggregate_loss_across_microbatch(logp, x["response_mask"])},
               "test_compute_group_normalized_rewards_grpo": {"advantages": a.run_compute_group_normalized_rewards(
                   torch.tensor([1.0, 0.0, 0.0, 1.0]), 2)[0]}}
    else:
        got = {"test_compute_grpo_clip_loss_large_cliprange": {
                   "array": a.run_compute_grpo_clip_loss(x["advantages"], logp, old, 10.0)[0]},
               "test_masked_mean_dim0": {"array": a.run_masked_mean(x["logits"], x["mask"], 0)}}
    for name, arrays in got.items():
        stored = dict(np.load(folder / f"{name}.npz"))
        for key, value in arrays.items():
            np.testing.assert_allclose(value.detach().numpy(), stored[key], rtol=1e-4, atol=1e-2, err_msg=name)


@pytest.mark.parametrize("cliprange", [0.99, 1.0, 1.5, 10.0])
def test_a_cliprange_of_one_or_more_clips_on_the_upper_side_only(monkeypatch, cliprange):
    # catches: the boundary of the lower-epsilon stand-in moved (cliprange 1 handed to sapo_lab, which requires
    # eps_low < 1 and raises), so a course value of exactly 1 fails; the expected loss is the definition written out
    a = load(monkeypatch, "2026")
    x = inputs()
    A, logp, old = x["rewards"], x["logp"], x["old"]
    grpo, _ = a.run_compute_policy_gradient_loss(A, logp, "grpo", old_log_probs=old, cliprange=cliprange)
    assert close(grpo, clipped(torch.exp(logp - old), A, cliprange))


# The copies the handout names, as (file of assignment/, where it goes in the course's checkout).
COPIES = {"2026": [("cs336_adapters.py", "tests/adapters.py")],
          "2025": [("cs336_adapters_2025.py", "tests/adapters.py"), ("cs336_adapters.py", "tests/cs336_adapters.py")]}


@pytest.mark.parametrize("edition", EDITIONS)
def test_the_files_the_handout_names_are_all_a_course_needs(monkeypatch, tmp_path, edition):
    # catches: an edition's adapters that load a file the handout does not tell the course to copy (the issue: the
    # 2025 file, copied alone, failed every test module at import on its 2026 sibling), or a handout whose copy
    # instructions differ from these
    handout = " ".join((ROOT / "book" / "assignment_sapo.md").read_text().split())
    for source, target in COPIES[edition]:
        assert f"`assignment/{source}` as `{target}`" in handout, (source, target)
        (tmp_path / target).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / target).write_text((ROOT / "assignment" / source).read_text())
    monkeypatch.setenv("SAPO_ASSIGNMENT", str(CORRECT))
    monkeypatch.delenv("CS336_COURSE_ADAPTERS", raising=False)
    spec = importlib.util.spec_from_file_location(f"course_adapters_{edition}", tmp_path / "tests" / "adapters.py")
    adapters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adapters)
    assert not {n for n in NAMES[edition] if not callable(getattr(adapters, n, None))}
    logp, old = torch.full((1, 1), -1.0, dtype=torch.float64), torch.full((1, 1), -1.5, dtype=torch.float64)
    adv = torch.tensor([1.0], dtype=torch.float64)
    if edition == "2026":
        per_token, _ = adapters.run_compute_policy_gradient_loss(adv, logp, "sapo", old, tau_pos=2.0, tau_neg=3.0)
    else:
        per_token, _ = adapters.run_compute_policy_gradient_loss(logp, "sapo", advantages=adv, old_log_probs=old,
                                                                 tau_pos=2.0, tau_neg=3.0)
    # -A (4 / tau) sigmoid(tau (r - 1)) at r = e^0.5, A = 1, tau = tau_pos = 2
    want = -(4 / 2.0) / (1 + math.exp(-2.0 * (math.exp(0.5) - 1)))
    assert math.isclose(float(per_token.reshape(())), want, rel_tol=1e-12)


def test_the_2025_adapters_alone_say_which_file_is_missing(tmp_path):
    # catches: the bare FileNotFoundError from importlib the tester met, naming no file to copy
    (tmp_path / "adapters.py").write_text(EDITIONS["2025"].read_text())
    spec = importlib.util.spec_from_file_location("course_adapters_alone", tmp_path / "adapters.py")
    with pytest.raises(ImportError, match=r"needs cs336_adapters\.py beside it .* as tests/cs336_adapters\.py"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
