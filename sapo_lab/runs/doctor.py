"""``python -m sapo_lab doctor RUN``: which regime a run's logs show the gate in, read from the logs alone.

A run is either a ``sapo_lab`` run folder (``config.json`` and ``metrics.jsonl``, read by
:func:`sapo_lab.runs.run_folder.read_metrics`) or a TRL output folder (``trainer_state.json``'s
``log_history``, at the top or in its newest ``checkpoint-N/``). Both are read into the same few
series (:data:`SAPO_LAB_KEYS`, :data:`TRL_KEYS`); :func:`diagnose` names the regime from them:

* **on-policy**: every logged ratio is 1 (``max |log r|`` within round-off): SAPO's gate weighs every
  token 1 and GRPO's clip never acts, so the update is GRPO's;
* **gate inert**: ratios move, but the gate removes under :attr:`Thresholds.inert_signal_removed` of
  the importance-weighted signal (median over the steps that trained a token);
* **gate active**: it removes more;
* **ratio not logged**: the log has no ratio statistics (TRL logs none for ``loss_type="sapo"``;
  :mod:`sapo_lab.integrations.trl_diagnostics` adds them under :data:`TRL_KEYS`' ``sapo/`` names).

Two findings are added to any regime: **groups with zero reward spread dominate** (their advantages
are 0, so they give no gradient) and **signs of collapse** (non-finite values, entropy or reward
falling far below where they were). Every threshold is :data:`THRESHOLDS`, declared once below.

Reading needs neither torch nor pydantic. What the book's gate map found near the run's regime is
:mod:`sapo_lab.evidence.doctor_map`'s, which reads the committed study.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from dataclasses import dataclass, field

from .run_folder import CONFIG, METRICS, RunDirError, read_metrics

TRAINER_STATE = "trainer_state.json"  # what transformers' Trainer writes beside its checkpoints
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")

# The series the doctor reads, and where each kind of run logs them.
SERIES = ("max_abs_log_ratio", "ratio_q01", "ratio_q99", "signal_removed", "gate_weight_mean",
          "zero_spread", "entropy", "reward", "loss", "grad_norm", "tokens_trained")
SAPO_LAB_KEYS = {
    "max_abs_log_ratio": "ratio/max_abs_log_ratio",
    "ratio_q01": "ratio/q01",
    "ratio_q99": "ratio/q99",
    "signal_removed": "losses/signal_removed_frac",
    "zero_spread": "rollout/zero_advantage_group_frac",
    "entropy": "rollout/entropy_mean",
    "reward": "rollout/reward_mean",
    "loss": "losses/loss",
    "grad_norm": "optim/grad_norm",
    "tokens_trained": "optim/tokens_trained",
}
# TRL's own names (GRPOTrainer's log) and the ``sapo/`` names of sapo_lab's TRL diagnostics; each value
# is the mean over the logging window's loss calls.
TRL_DIAGNOSTICS = {
    "max_abs_log_ratio": "sapo/max_abs_log_ratio",
    "ratio_q01": "sapo/ratio_q01",
    "ratio_q99": "sapo/ratio_q99",
    "signal_removed": "sapo/signal_removed_frac",
    "gate_weight_mean": "sapo/gate_weight_mean",
}
TRL_KEYS = {
    **TRL_DIAGNOSTICS,
    "zero_spread": "frac_reward_zero_std",
    "entropy": "entropy",
    "reward": "reward",
    "loss": "loss",
    "grad_norm": "grad_norm",
}


@dataclass(frozen=True)
class Thresholds:
    """Where one regime ends and the next begins; every value the doctor compares against.

    * ``on_policy_log_ratio``: the largest ``|log r|`` still read as r = 1. A recomputed float32
      forward of the sampling policy differs from it by round-off (about 1e-7); at ``|r - 1| = 1e-4``
      SAPO's gate weight sech²(τ(r - 1)/2) is 1 to within 1e-8 and GRPO's clip is far away.
    * ``inert_signal_removed``: the median share of the importance-weighted signal ``|A| r`` the gate
      removes (``signal_removed_frac``) below which the gate is called inert: the update differs from
      the ungated one by under this share.
    * ``zero_spread_dominating``: the median share of groups whose rewards all agree above which
      they dominate the batch (more than half the groups give no gradient).
    * ``entropy_collapse``: the last quarter's mean entropy below this fraction of the first
      quarter's is a sign of collapse (the policy has stopped exploring).
    * ``reward_collapse``: the last quarter's mean reward below this fraction of the best quarter's.
    """

    on_policy_log_ratio: float = 1e-4
    inert_signal_removed: float = 0.01
    zero_spread_dominating: float = 0.5
    entropy_collapse: float = 0.1
    reward_collapse: float = 0.5

    def line(self) -> str:
        return (f"thresholds: on-policy max |log r| <= {self.on_policy_log_ratio:g}; inert median signal removed "
                f"< {self.inert_signal_removed:.0%}; zero-spread groups dominate above {self.zero_spread_dominating:.0%}; "
                f"collapse: last-quarter entropy < {self.entropy_collapse:g} x first quarter's, or reward < "
                f"{self.reward_collapse:g} x best quarter's, or a non-finite value")


THRESHOLDS = Thresholds()

REGIMES = ("on-policy", "gate inert", "gate active", "no token trained", "ratio not logged")


@dataclass
class RunLog:
    """A run's logged steps as the doctor's series (``SERIES``), and the settings its files state."""

    path: str
    kind: str  # "sapo_lab" or "trl"
    steps: list[int]
    series: dict[str, list[float | None]]  # name -> one value per step, None where not logged
    settings: dict = field(default_factory=dict)  # loss_type, staleness, learning_rate, tau_pos, tau_neg
    logs_ratio: bool = True  # whether the log has ratio statistics at all (null on a step that trained nothing)


@dataclass
class Reading:
    """What :func:`diagnose` found: the regime, the added findings, and the numbers behind them."""

    regime: str  # one of REGIMES
    zero_spread_dominates: bool
    collapse_signs: list[str]
    lines: list[str]  # one per finding, each with its numbers
    numbers: dict[str, float | None]  # the medians and extremes the lines quote

    @property
    def verdict(self) -> str:
        parts = [self.regime]
        if self.zero_spread_dominates:
            parts.append("groups with zero reward spread dominate")
        if self.collapse_signs:
            parts.append("signs of collapse")
        return "verdict: " + "; ".join(parts)


# ---------------------------------------------------------------- reading


def _load_json(path: str):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8", errors="replace"))
    except ValueError as exc:
        raise RunDirError(f"{path} is damaged (not JSON: {exc})") from None
    except OSError as exc:
        raise RunDirError(f"{path} cannot be read ({exc.strerror})") from None


def _number(value) -> float | None:
    """A logged number as a float (NaN and inf kept: they are findings); None for null or anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_run(path: str) -> RunLog:
    """The run at ``path``, ``sapo_lab``'s or TRL's; a one-line :class:`RunDirError` for anything else."""
    if not os.path.exists(path):
        raise RunDirError(f"{path}: no such folder")
    if not os.path.isdir(path):
        raise RunDirError(f"{path} is not a folder: give the run's folder")
    if os.path.isfile(os.path.join(path, METRICS)):
        return _read_sapo_lab(path)
    state = _trainer_state_path(path)
    if state is not None:
        return _read_trl(path, state)
    raise RunDirError(f"{path} holds no run: neither a sapo_lab run ({METRICS}) nor a TRL output folder "
                      f"({TRAINER_STATE}, or checkpoint-N/{TRAINER_STATE})")


def _read_sapo_lab(path: str) -> RunLog:
    found = read_metrics(os.path.join(path, METRICS))
    rows = found.rows
    if not rows and found.torn_last_line:  # its only line is unreadable: damaged, not a run yet to log a step
        raise RunDirError(f"{os.path.join(path, METRICS)} is damaged (its only line is not a JSON row with an "
                          "integer 'step')")
    settings = {}
    if os.path.isfile(os.path.join(path, CONFIG)):
        cfg = _load_json(os.path.join(path, CONFIG))
        if not isinstance(cfg, dict):
            raise RunDirError(f"{os.path.join(path, CONFIG)} is damaged (not a JSON object)")
        loss, opt = cfg.get("loss", {}), cfg.get("optimization", {})
        settings = {"loss_type": loss.get("loss_type"), "staleness": opt.get("steps_per_generation"),
                    "learning_rate": opt.get("learning_rate"), "tau_pos": loss.get("sapo_temperature_pos"),
                    "tau_neg": loss.get("sapo_temperature_neg")}
    series = {name: [_number(r.get(SAPO_LAB_KEYS[name])) if name in SAPO_LAB_KEYS else None for r in rows]
              for name in SERIES}
    # A step that trained no token (every group's rewards agreed) logs max |log r| = 0 but no quantile:
    # its 0 is no measurement.
    series["max_abs_log_ratio"] = [None if q is None else m for m, q in
                                   zip(series["max_abs_log_ratio"], series["ratio_q01"], strict=True)]
    logs_ratio = any(SAPO_LAB_KEYS["ratio_q01"] in r for r in rows)
    return _check_ranges(RunLog(path, "sapo_lab", [r["step"] for r in rows], series, settings, logs_ratio),
                         os.path.join(path, METRICS))


# What a logged value can be at all: a share lies in [0, 1]; a ratio, a |log r| and an entropy are not negative.
# A finite value outside its range is a damaged log, not a regime (non-finite values are read as collapse).
RANGES = {"signal_removed": (0.0, 1.0), "zero_spread": (0.0, 1.0), "ratio_q01": (0.0, math.inf),
          "ratio_q99": (0.0, math.inf), "max_abs_log_ratio": (0.0, math.inf), "entropy": (0.0, math.inf),
          "gate_weight_mean": (0.0, math.inf)}


def _check_ranges(log: RunLog, source: str) -> RunLog:
    for name, (low, high) in RANGES.items():
        for step, v in zip(log.steps, log.series[name], strict=True):
            if v is not None and math.isfinite(v) and not low <= v <= high:
                raise RunDirError(f"{source} is damaged: {name} = {v:g} at step {step} lies outside [{low:g}, {high:g}]")
    return log


def _trainer_state_path(path: str) -> str | None:
    """``trainer_state.json`` at the top of ``path``, else in its newest ``checkpoint-N/``; None without one."""
    top = os.path.join(path, TRAINER_STATE)
    if os.path.isfile(top):
        return top
    checkpoints = sorted((int(m.group(1)), name) for name in os.listdir(path) if (m := _CHECKPOINT.match(name))
                         and os.path.isfile(os.path.join(path, name, TRAINER_STATE)))
    return os.path.join(path, checkpoints[-1][1], TRAINER_STATE) if checkpoints else None


def _read_trl(path: str, state_path: str) -> RunLog:
    state = _load_json(state_path)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list) or not all(isinstance(r, dict) for r in history):
        raise RunDirError(f"{state_path} is damaged (no log_history list of objects)")
    # Training rows carry the loss; the closing row (train_runtime, train_loss) and eval rows do not.
    rows = [r for r in history if "loss" in r and isinstance(r.get("step"), int)]
    series = {name: [_number(r.get(TRL_KEYS[name])) if name in TRL_KEYS else None for r in rows] for name in SERIES}
    logs_ratio = any(key in r for r in rows for key in TRL_DIAGNOSTICS.values())
    return _check_ranges(RunLog(path, "trl", [r["step"] for r in rows], series, {}, logs_ratio), state_path)


# ---------------------------------------------------------------- the regime


def _finite(values) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _quarters(values: list[float]) -> tuple[float, float, float]:
    """(first quarter's mean, last quarter's mean, best quarter-long window's mean) of a series."""
    n = max(1, len(values) // 4)
    windows = [statistics.fmean(values[i:i + n]) for i in range(len(values) - n + 1)]
    return windows[0], windows[-1], max(windows)


def _percent(x: float) -> str:
    return f"{x:.2%}" if x < 0.01 else f"{x:.1%}"


def diagnose(log: RunLog, thresholds: Thresholds = THRESHOLDS) -> Reading:
    """The regime of ``log`` and the findings added to it (see the module docstring), with their numbers."""
    if not log.steps:
        raise RunDirError(f"{log.path} has no logged training step yet: nothing to read")
    t = thresholds
    s = log.series
    trained = [i for i, v in enumerate(s["max_abs_log_ratio"]) if v is not None]  # steps that measured a ratio
    numbers: dict[str, float | None] = {"steps": len(log.steps), "steps_with_ratio": len(trained)}
    lines = []
    max_log = _finite(s["max_abs_log_ratio"][i] for i in trained)
    removed = _finite(s["signal_removed"][i] for i in trained)
    numbers["max_abs_log_ratio"] = max(max_log) if max_log else None
    numbers["signal_removed_median"] = statistics.median(removed) if removed else None
    numbers["signal_removed_max"] = max(removed) if removed else None
    low, high = _finite(s["ratio_q01"][i] for i in trained), _finite(s["ratio_q99"][i] for i in trained)
    numbers["ratio_q01_min"] = min(low) if low else None
    numbers["ratio_q99_max"] = max(high) if high else None
    spread = (f"; ratio q01 down to {numbers['ratio_q01_min']:.3g}, q99 up to {numbers['ratio_q99_max']:.3g}"
              if low and high else "")
    if not log.logs_ratio:
        regime = "ratio not logged"
        lines.append("ratio not logged: this log has no ratio statistics, so the gate's regime cannot be read "
                     "(TRL logs none for loss_type='sapo'; train with sapo_lab.integrations.trl_diagnostics to "
                     "log them as sapo/...)")
    elif not trained:
        # claimed only where the log shows it: a token count of 0, or every group's rewards agreeing, on every step
        no_tokens = all(v == 0 for v in s["tokens_trained"])
        agreed = all(v == 1 for v in s["zero_spread"])
        if not (no_tokens or agreed):
            raise RunDirError(
                f"{log.path}: no step logs max |log r|, and the token counts ({SAPO_LAB_KEYS['tokens_trained']}) and "
                "zero-spread shares that would show no token was trained are missing: the log is incomplete, so "
                "the regime cannot be read")
        regime = "no token trained"
        why = ("every group's rewards agreed, so every advantage was 0" if agreed
               else f"{SAPO_LAB_KEYS['tokens_trained']} is 0 on every step")
        lines.append(f"no token trained: none of the {len(log.steps)} logged steps updated on a token ({why})")
    elif not max_log:
        raise RunDirError(f"{log.path}: the ratio statistics are logged but none is a finite number")
    elif numbers["max_abs_log_ratio"] <= t.on_policy_log_ratio:
        regime = "on-policy"
        lines.append(f"on-policy: every ratio is 1 (max |log r| over {len(trained)} steps = "
                     f"{numbers['max_abs_log_ratio']:.2g} <= {t.on_policy_log_ratio:g}): SAPO's gate weighs every "
                     "token 1 and GRPO's clip never acts, so SAPO is GRPO here")
    elif not removed:
        regime = "ratio not logged"
        lines.append("ratio logged without the share of signal the gate removed: the gate's regime cannot be read")
    elif numbers["signal_removed_median"] < t.inert_signal_removed:
        regime = "gate inert"
        lines.append(f"gate inert: ratios move (max |log r| {numbers['max_abs_log_ratio']:.3g}{spread}) but the gate "
                     f"removed a median {_percent(numbers['signal_removed_median'])} of the importance-weighted "
                     f"signal over {len(removed)} steps (< {t.inert_signal_removed:.0%}; at most "
                     f"{_percent(numbers['signal_removed_max'])})")
    else:
        regime = "gate active"
        lines.append(f"gate active: the gate removed a median {_percent(numbers['signal_removed_median'])} of the "
                     f"importance-weighted signal over {len(removed)} steps (>= {t.inert_signal_removed:.0%}; at "
                     f"most {_percent(numbers['signal_removed_max'])}); max |log r| "
                     f"{numbers['max_abs_log_ratio']:.3g}{spread}")
    loss_type = log.settings.get("loss_type")
    if loss_type is not None and not str(loss_type).startswith("sapo") and regime.startswith("gate"):
        lines.append(f"loss_type {loss_type}: its 'gate' is the kernel it weighs r with (a clip for grpo and gspo), "
                     "not SAPO's soft gate")
    weights = _finite(s["gate_weight_mean"][i] for i in trained)
    if weights:
        numbers["gate_weight_mean_median"] = statistics.median(weights)
        lines.append(f"mean gate weight w(r): median {numbers['gate_weight_mean_median']:.4g} over {len(weights)} steps")

    zero = _finite(s["zero_spread"])
    numbers["zero_spread_median"] = statistics.median(zero) if zero else None
    dominates = bool(zero) and numbers["zero_spread_median"] > t.zero_spread_dominating
    if dominates:
        lines.append(f"groups with zero reward spread dominate: a median {numbers['zero_spread_median']:.0%} of each "
                     f"step's groups had rewards that all agreed (> {t.zero_spread_dominating:.0%}), and those give "
                     "no gradient")
    elif zero:
        lines.append(f"groups with zero reward spread: a median {numbers['zero_spread_median']:.0%} of each step's "
                     f"groups (<= {t.zero_spread_dominating:.0%}: they do not dominate)")

    signs = _collapse_signs(log, t, numbers)
    if signs:
        lines.append("signs of collapse: " + "; ".join(signs))
    return Reading(regime, dominates, signs, lines, numbers)


def _collapse_signs(log: RunLog, t: Thresholds, numbers: dict) -> list[str]:
    signs = []
    for name in SERIES:
        bad = [step for step, v in zip(log.steps, log.series[name], strict=True) if v is not None and not math.isfinite(v)]
        if bad:
            signs.append(f"{name} is not finite at {len(bad)} step(s), first at step {bad[0]}")
    entropy = _finite(log.series["entropy"])
    if len(entropy) >= 2:
        first, last, _ = _quarters(entropy)
        numbers["entropy_first"], numbers["entropy_last"] = first, last
        if first > 0 and last < t.entropy_collapse * first:
            signs.append(f"entropy fell from {first:.3g} (first quarter) to {last:.3g} (last quarter), under "
                         f"{t.entropy_collapse:g} x its start")
    reward = _finite(log.series["reward"])
    if len(reward) >= 2:
        _, last, best = _quarters(reward)
        numbers["reward_best_quarter"], numbers["reward_last_quarter"] = best, last
        if best > 0 and last < t.reward_collapse * best:
            signs.append(f"reward fell to {last:.3g} (last quarter) from {best:.3g} (best quarter), under "
                         f"{t.reward_collapse:g} x its best")
    return signs


def settings_text(log: RunLog) -> str:
    """``sapo_lab run, loss_type sapo, M = 4 (...), lr 0.01, τ+ 1 / τ- 1.05``, or that the log states no settings."""
    st = {k: v for k, v in log.settings.items() if v is not None}
    if not st:
        return f"{log.kind} run (its log states no settings)"
    parts = [f"loss_type {st['loss_type']}" if "loss_type" in st else None,
             f"M = {st['staleness']} (update minibatches per rollout batch)" if "staleness" in st else None,
             f"lr {st['learning_rate']:g}" if "learning_rate" in st else None,
             f"τ+ {st['tau_pos']:g} / τ- {st['tau_neg']:g}" if "tau_pos" in st and "tau_neg" in st
             and str(st.get("loss_type", "sapo")).startswith("sapo") else None]
    return f"{log.kind} run, " + ", ".join(p for p in parts if p)


def report(log: RunLog, reading: Reading, thresholds: Thresholds = THRESHOLDS) -> list[str]:
    """The doctor's lines, verdict first: the verdict, each finding with its numbers, the run, the thresholds."""
    return [reading.verdict, *(f"  {line}" for line in reading.lines),
            f"run: {log.path} ({settings_text(log)}; {len(log.steps)} logged steps)", thresholds.line()]
