"""`python -m sapo_lab conformance` on losses that used to get a misleading answer: each ends in one true line near
the top, or in one line on stderr and exit 2 where the loss cannot be audited.

Every loss is written plainly in a user's module (no helper from sapo_lab), as the people who tried the audit wrote
theirs: the paper's -(4/tau) sigmoid(tau (r - 1)) A with a per-response mean, changed in one place.
"""

from __future__ import annotations

import json
import math

import pytest
from _user_module import install_user_module, run_conformance

from sapo_lab.conformance import EXTREME, ReportCard
from sapo_lab.conformance.card import WIDTH

LOSSES = '''
import time
import torch


def _tau(advantages, like):
    return torch.full_like(advantages, 1.05, dtype=like.dtype).masked_fill(advantages > 0, 1.0)[:, None]


def _mean(token, mask):
    m = mask.to(token.dtype)
    n = m.sum(-1)
    keep = n > 0
    if not bool(keep.any()):
        return (token * m).sum()
    return ((token * m).sum(-1)[keep] / n[keep]).mean()


def paper(logp, old_logp, advantages, mask):
    tau = _tau(advantages, logp)
    r = torch.exp(logp - old_logp)
    return _mean(-(4 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None], mask)


def under_no_grad(logp, old_logp, advantages, mask):
    with torch.no_grad():
        return paper(logp, old_logp, advantages, mask)


def logp_detached(logp, old_logp, advantages, mask):
    return paper(logp.detach(), old_logp, advantages, mask)


def old_logp_is_logp(logp, old_logp, advantages, mask):
    old_logp = logp
    return paper(logp, old_logp, advantages, mask)


def in_float32(logp, old_logp, advantages, mask):
    return paper(logp.float(), old_logp.float(), advantages.float(), mask)


def in_float32_cast_back(logp, old_logp, advantages, mask):
    return paper(logp.float(), old_logp.float(), advantages.float(), mask).to(logp.dtype)


def in_bfloat16(logp, old_logp, advantages, mask):
    return paper(logp.bfloat16(), old_logp.bfloat16(), advantages.bfloat16(), mask).to(logp.dtype)


def in_float16(logp, old_logp, advantages, mask):
    return paper(logp.half(), old_logp.half(), advantages.half(), mask).to(logp.dtype)


def nan_everywhere(logp, old_logp, advantages, mask):
    tau = _tau(advantages, logp)
    r = torch.exp(torch.log(logp) - torch.log(old_logp))  # log of log-probs: NaN for every token
    return _mean(-(4 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None], mask)


def gradient_only(logp, old_logp, advantages, mask):
    tau = _tau(advantages, logp)
    r = torch.exp(logp - old_logp)
    s = torch.sigmoid(tau * (r - 1))
    return _mean(-advantages[:, None] * (4 * s * (1 - s)).detach() * r, mask)


def hard_clamp(logp, old_logp, advantages, mask):
    tau = _tau(advantages, logp)
    r = torch.exp(torch.clamp(logp - old_logp, -1.0, 1.0))
    return _mean(-(4 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None], mask)


def two_over_tau(logp, old_logp, advantages, mask):
    tau = _tau(advantages, logp)
    r = torch.exp(logp - old_logp)
    return _mean(-(2 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None], mask)


def gate_on_log_ratio(logp, old_logp, advantages, mask):
    tau = _tau(advantages, logp)
    return _mean(-(4 / tau) * torch.sigmoid(tau * (logp - old_logp)) * advantages[:, None], mask)


def tau_by_ratio_side(logp, old_logp, advantages, mask):
    r = torch.exp(logp - old_logp)
    tau = torch.full_like(r, 1.05).masked_fill(r.detach() > 1, 1.0)
    return _mean(-(4 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None], mask)


def ratio_clamp(logp, old_logp, advantages, mask):
    tau = _tau(advantages, logp)
    r = torch.clamp(torch.exp(logp - old_logp), 0.8, 1.2)
    return _mean(-(4 / tau) * torch.sigmoid(tau * (r - 1)) * advantages[:, None], mask)


CALLS = []


def slow_first_call(logp, old_logp, advantages, mask):
    if not CALLS:
        time.sleep(0.6)
    CALLS.append(1)
    return paper(logp, old_logp, advantages, mask)


def slow(logp, old_logp, advantages, mask):
    time.sleep(0.3)
    return paper(logp, old_logp, advantages, mask)


def hangs(logp, old_logp, advantages, mask):
    time.sleep(30)
    return paper(logp, old_logp, advantages, mask)
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    return install_user_module(tmp_path, monkeypatch, "user_losses", LOSSES)


def _run(argv, capsys):
    code, out, err = run_conformance(argv, capsys)
    if "--json" not in argv:
        assert not [line for line in out.splitlines() if len(line) > WIDTH], out
    return code, out, err


def _one_line_exit_2(code, out, err):
    assert code == 2 and out == "", out
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


# ---- losses that cannot be audited: one line, exit 2 ----

@pytest.mark.parametrize("name,words", [
    ("under_no_grad", "no gradient reaches logp"),
    ("logp_detached", "no gradient reaches logp"),
    ("old_logp_is_logp", "old_logp taken from logp without detach"),
])
def test_a_loss_without_gradient_in_logp_is_one_line_exit_2(name, words, user_dir, capsys):
    """Catches the ZeroDivisionError traceback (exit 1, the code of DIFFERS) a zero on-policy gradient led to."""
    err = _one_line_exit_2(*_run([f"user_losses:{name}"], capsys))
    assert words in err, err


def test_a_loss_that_is_nan_everywhere_is_one_line_exit_2(user_dir, capsys):
    """Catches "DIFFERS in 15 of 15" with invented causes (A = 0 gets a gradient, the mask is not applied)."""
    err = _one_line_exit_2(*_run(["user_losses:nan_everywhere"], capsys))
    assert "not finite on the plainest batch" in err and "value nan" in err, err


# ---- a loss computing in float32 inside ----

@pytest.mark.parametrize("name", ["in_float32", "in_float32_cast_back"])
def test_a_loss_computing_in_float32_is_audited_in_float32(name, user_dir, capsys):
    """Catches a float32 loss audited at float64 (its rounding read as eight invented causes). The card must be the
    one `--dtype float32` gives: its only difference is the true one of any plain float32 loss, exp(log r)
    overflowing above log r = ln(float32 max) = 88.72."""
    code, out, _ = _run([f"user_losses:{name}", "--json"], capsys)
    auto = json.loads(out)
    code32, out32, _ = _run([f"user_losses:{name}", "--dtype", "float32", "--json"], capsys)
    assert code == code32 == 1 and auto["dtype"] == "float32"
    assert auto["rows"] == json.loads(out32)["rows"]
    card = ReportCard.from_dict(auto)
    assert [r.property for r in card.differences()] == [EXTREME], card.to_text()
    upper = card.row(EXTREME).values["A > 0"]["upper"]
    assert upper["kind"] == "nonfinite" and upper["threshold"] == pytest.approx(math.log(3.4028234663852886e38),
                                                                                abs=1e-3)
    _, text, _ = _run([f"user_losses:{name}"], capsys)
    lines = text.splitlines()
    assert lines[0] == "DIFFERS in 1 of 15 checks (float32, token level)" and "computes in float32" in lines[1], text
    for invented in ("a detached weight", "no single tau", "other: no known aggregation"):
        assert invented not in text


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_loss_computing_in_sixteen_bits_is_audited_in_its_dtype(dtype, user_dir, capsys):
    """Catches a 16-bit loss taken for float32 (or float64): the two are told apart by how fine a change of the
    log-probs each rounds away."""
    _, out, _ = _run([f"user_losses:in_{dtype}"], capsys)
    lines = out.splitlines()
    assert lines[0].endswith(f"({dtype}, token level)") and f"computes in {dtype}" in lines[1], out


def test_asking_float64_for_a_float32_loss_says_which_dtype_to_pass(user_dir, capsys):
    err = _one_line_exit_2(*_run(["user_losses:in_float32", "--dtype", "float64"], capsys))
    assert "computes in float32" in err and "rerun with --dtype float32" in err, err


def test_a_float64_loss_is_not_taken_for_float32(user_dir, capsys):
    """The false alarm of the detection: the paper's loss in float64 is audited in float64, with no precision note."""
    code, out, _ = _run(["user_losses:paper"], capsys)
    assert code == 0 and out.startswith("CONFORMS: all 15 checks match the paper (float64, token level)")
    assert "computes in" not in out


# ---- a surrogate whose gradient is the paper's, and a hard clamp's kink ----

def test_the_gradient_only_surrogate_is_gradient_equivalent(user_dir, capsys):
    """-A sg(w(r)) r applies exactly the paper's gradient: catches DIFFERS for it."""
    code, out, _ = _run(["user_losses:gradient_only"], capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("CONFORMS"), out
    assert lines[1].startswith("  note: gradient-equivalent: the applied gradient is the paper's"), out


def test_a_hard_clamps_kink_is_not_a_detached_weight(user_dir, capsys):
    """log r clamped to [-1, 1]: the closed-form probe holds a token at log r = 1, on the kink, where a central
    difference averages the two slopes. Catches "a detached weight" said of it; the clamp is named with its
    thresholds, e^-1 and e^1, in the first lines."""
    code, out, _ = _run(["user_losses:hard_clamp"], capsys)
    assert code == 1 and "a detached weight" not in out, out
    head = "\n".join(out.splitlines()[:3])
    assert "a clamp of the ratio" in head, out
    assert f"below r = {math.exp(-1):.4g}" in head and f"above r = {math.exp(1):.4g}" in head, out


# ---- causes named in the first three lines ----

@pytest.mark.parametrize("name,cause", [
    ("two_over_tau", "a 2/tau prefactor where the paper has 4/tau"),
    ("gate_on_log_ratio", "the gate is on log r"),
    ("tau_by_ratio_side", "tau chosen by the side of r = 1"),
    ("ratio_clamp", f"below r = {0.8:.4g} (log r {math.log(0.8):+.4f})"),
    ("ratio_clamp", f"above r = {1.2:.4g} (log r {math.log(1.2):+.4f})"),
])
def test_each_cause_is_named_in_the_first_three_lines(name, cause, user_dir, capsys):
    """Catches the causes these mistakes used to hide behind: "one constant scale 0.5" for 2/tau, and only shape
    deviations for the others."""
    code, out, _ = _run([f"user_losses:{name}"], capsys)
    head = "\n".join(out.splitlines()[:3]).replace("\n    ", " ")
    assert code == 1 and head.startswith("DIFFERS in ") and cause in head, out


# ---- progress and --timeout ----

def test_progress_goes_to_stderr_and_leaves_stdout_alone(user_dir, capsys):
    """Catches an audit silent on stderr with --progress, and progress written into the card on stdout."""
    code, quiet, quiet_err = _run(["user_losses:paper"], capsys)
    code2, out, err = _run(["user_losses:paper", "--progress"], capsys)
    assert code == code2 == 0 and out == quiet and quiet_err == ""
    lines = err.splitlines()
    assert lines and all(line.startswith("conformance: ") for line in lines), err
    for stage in ("aggregation", "gate shape and temperatures", "finite differences", "extreme log-ratios"):
        assert any(stage in line for line in lines), (stage, err)
    assert lines[-1].startswith("conformance: done: ")


def test_a_slow_loss_turns_progress_on_by_itself(user_dir, capsys):
    """The first call takes 0.6 s (>= 0.5 s, the slow-call threshold): catches a slow audit staying silent."""
    code, _, err = _run(["user_losses:slow_first_call"], capsys)
    assert code == 0 and "one call of the loss took" in err and "--timeout" in err, err
    assert "extreme log-ratios" in err


def test_timeout_stops_a_slow_audit_in_one_line(user_dir, capsys):
    """0.3 s a call and about 85 calls: --timeout 1 stops it with one line and exit 2 (catches a flag ignored)."""
    err = _one_line_exit_2(*_run(["user_losses:slow", "--timeout", "1"], capsys))
    assert "did not finish within --timeout 1 s" in err, err


def test_timeout_interrupts_a_single_call_that_hangs(user_dir, capsys):
    """A call of 30 s is interrupted at the limit (catches a deadline checked only between calls)."""
    import time

    start = time.monotonic()
    err = _one_line_exit_2(*_run(["user_losses:hangs", "--timeout", "1"], capsys))
    assert "did not finish within --timeout 1 s" in err and time.monotonic() - start < 20, err


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_timeout_must_be_positive(value, user_dir, capsys):
    err = _one_line_exit_2(*_run(["user_losses:paper", "--timeout", value], capsys))
    assert "--timeout must be a finite number of seconds > 0" in err


# ---- the same answers from audit() itself ----

def test_audit_itself_refuses_detects_and_names_as_the_command_does(user_dir):
    """The framework runner and the book call audit() directly: catches these readings living only in the command
    line, where a direct audit() call would still crash on a loss without gradient, read NaN or float32 rounding as
    differences, and say "one constant scale" for 2/tau."""
    import user_losses

    from sapo_lab.conformance import FINITE_DIFFERENCES, GATE_SHAPE, ON_POLICY, AdapterError, audit

    for name, words in (("under_no_grad", "no gradient reaches logp"), ("nan_everywhere", "not finite on the plainest"),
                        ("old_logp_is_logp", "logp cancels out of the loss")):
        with pytest.raises(AdapterError, match=words):
            audit(getattr(user_losses, name))
    card = audit(user_losses.in_float32)
    assert card.dtype == "float32" and "computes in float32" in card.meta["precision"], card.meta
    with pytest.raises(AdapterError, match="rerun with --dtype float32"):
        audit(user_losses.in_float32, dtype="float64")
    assert "a 2/tau prefactor" in audit(user_losses.two_over_tau).row(ON_POLICY).summary
    assert "the gate is on log r" in audit(user_losses.gate_on_log_ratio).row(GATE_SHAPE).summary
    clamp = audit(user_losses.hard_clamp)
    assert clamp.row(FINITE_DIFFERENCES).verdict == "pass" and "a clamp of the ratio" in clamp.row(GATE_SHAPE).summary
    assert audit(user_losses.gradient_only).row(FINITE_DIFFERENCES).verdict == "info"
