"""Paired comparisons of two methods over seeds: the statistics the evidence chapters use.

Runs of one seed share a cold start (the same SFT weights, the same data order), so the
seed-to-seed spread of a single method is mostly that shared start. The difference
``method - reference`` at a matched seed and grid cell cancels it; its spread is what
decides whether a gap is noise. Everything here works on those paired differences:

* :func:`t_interval`, :func:`bootstrap_interval`: intervals for the mean difference;
* :func:`paired_t_test`, :func:`sign_test`, :func:`permutation_test`: two-sided p-values;
* :func:`paired_sample_size`, :func:`paired_t_power`: how many pairs a paired t-test needs;
* :func:`holm`: Holm's step-down adjustment for a declared family of tests;
* :func:`trajectory_key`, :func:`distinct`: the same run found in two studies counts once.

The statistics use only the standard library: the t distribution comes from the
regularised incomplete beta function (a Lentz continued fraction), the noncentral t from
a quadrature over the chi-square density. ``tests/test_paired.py`` checks both against scipy.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

# ---------------------------------------------------------------- the t distribution


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    y = t * t / (df + t * t)
    if y < 0.5:  # near 0, P(|T| < |t|) directly: df / (df + t^2) would round to 1 and flatten the cdf
        return 0.5 + 0.5 * math.copysign(_betainc(0.5, df / 2.0, y), t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {p}")
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return 0.5 * (lo + hi)


def _noncentral_t_sf(c: float, df: float, ncp: float, nodes: int = 4000) -> float:
    """P(T' > c) for a noncentral t: E_V[Phi(ncp - c sqrt(V/df))], V ~ chi-square(df), by quadrature."""
    upper = df + 60.0 * math.sqrt(2.0 * df) + 60.0
    h = upper / nodes
    log_norm = -(df / 2.0) * math.log(2.0) - math.lgamma(df / 2.0)
    total = 0.0
    for i in range(nodes):  # midpoint rule: the chi-square density is smooth away from 0
        v = (i + 0.5) * h
        dens = math.exp(log_norm + (df / 2.0 - 1.0) * math.log(v) - v / 2.0)
        z = ncp - c * math.sqrt(v / df)
        total += dens * 0.5 * math.erfc(-z / math.sqrt(2))
    return total * h


# ---------------------------------------------------------------- tests and intervals


def _mean_sd(diffs: list[float]) -> tuple[float, float]:
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else float("nan")
    return mean, sd


def _check(diffs) -> list[float]:
    diffs = [float(d) for d in diffs]
    if not diffs:
        raise ValueError("no paired differences")
    if not all(math.isfinite(d) for d in diffs):
        raise ValueError(f"paired differences must be finite, got {diffs}")
    return diffs


def t_interval(diffs, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided ``1 - alpha`` t interval for the mean paired difference (needs 2 or more pairs)."""
    diffs = _check(diffs)
    if len(diffs) < 2:
        raise ValueError("a t interval needs at least 2 pairs")
    mean, sd = _mean_sd(diffs)
    half = t_quantile(1.0 - alpha / 2.0, len(diffs) - 1) * sd / math.sqrt(len(diffs))
    return mean - half, mean + half


def paired_t_test(diffs) -> float:
    """Two-sided p-value of the paired t-test of mean difference 0."""
    diffs = _check(diffs)
    if len(diffs) < 2:
        raise ValueError("a paired t-test needs at least 2 pairs")
    mean, sd = _mean_sd(diffs)
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    t = mean / (sd / math.sqrt(len(diffs)))
    return 2.0 * (1.0 - t_cdf(abs(t), len(diffs) - 1))


def bootstrap_interval(diffs, alpha: float = 0.05, resamples: int = 20000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean paired difference (pairs resampled with replacement)."""
    diffs = _check(diffs)
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choice(diffs) for _ in range(n)) / n for _ in range(resamples))
    lo = means[int(math.floor(alpha / 2.0 * (resamples - 1)))]
    hi = means[int(math.ceil((1.0 - alpha / 2.0) * (resamples - 1)))]
    return lo, hi


def sign_test(diffs) -> float:
    """Exact two-sided sign test: ties (difference 0) are dropped; p = 1 when nothing is left."""
    diffs = _check(diffs)
    pos = sum(d > 0 for d in diffs)
    neg = sum(d < 0 for d in diffs)
    n = pos + neg
    if n == 0:
        return 1.0
    k = min(pos, neg)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def permutation_test(diffs, exact_up_to: int = 16, resamples: int = 100000, seed: int = 0) -> float:
    """Two-sided paired permutation (sign-flip) test of the mean difference.

    Under the null the sign of each pair's difference is a fair coin. Up to ``exact_up_to``
    pairs every one of the 2^n sign patterns is enumerated; beyond, ``resamples`` random
    patterns (the observed one included, so p > 0).
    """
    diffs = _check(diffs)
    observed = abs(sum(diffs))
    tol = 1e-12 * max(1.0, observed)
    if len(diffs) <= exact_up_to:
        hits = total = 0
        for signs in itertools.product((1.0, -1.0), repeat=len(diffs)):
            total += 1
            hits += abs(sum(s * d for s, d in zip(signs, diffs, strict=True))) >= observed - tol
        return hits / total
    rng = random.Random(seed)
    hits = sum(abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed - tol for _ in range(resamples))
    return (hits + 1) / (resamples + 1)


def two_sided_t_power(df: float, ncp: float, alpha: float = 0.05) -> float:
    """Power of a two-sided t-test at level ``alpha`` with ``df`` degrees of freedom and noncentrality ``ncp``."""
    c = t_quantile(1.0 - alpha / 2.0, df)
    return _noncentral_t_sf(c, df, ncp) + _noncentral_t_sf(c, df, -ncp)


def paired_t_power(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test with ``n`` pairs against a true mean difference ``effect``."""
    if n < 2:
        raise ValueError("power needs at least 2 pairs")
    if not sd > 0:
        raise ValueError(f"the paired SD must be > 0, got {sd}")
    return two_sided_t_power(n - 1, abs(effect) * math.sqrt(n) / sd, alpha)


def paired_sample_size(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8, max_pairs: int = 10000) -> int:
    """The fewest pairs whose two-sided paired t-test reaches ``power`` against ``effect`` (exact noncentral t)."""
    return smallest_n(lambda n: paired_t_power(n, effect, sd, alpha), effect, power, max_pairs, "pairs")


def smallest_n(power_at, effect: float, power: float, limit: int, unit: str) -> int:
    """The fewest n >= 2 with ``power_at(n) >= power`` (``unit`` names n in the error when ``limit`` is passed)."""
    if effect == 0:
        raise ValueError("the effect to detect must be nonzero")
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    for n in range(2, limit + 1):
        if power_at(n) >= power:
            return n
    raise ValueError(f"more than {limit} {unit} needed")


def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, dict]:
    """Holm's step-down adjustment: ``{name: {"p", "p_adjusted", "reject"}}``."""
    order = sorted(p_values, key=lambda k: p_values[k])
    m = len(order)
    out, running, stopped = {}, 0.0, False
    for i, name in enumerate(order):
        running = max(running, min(1.0, (m - i) * p_values[name]))
        stopped = stopped or p_values[name] > alpha / (m - i)
        out[name] = {"p": p_values[name], "p_adjusted": running, "reject": not stopped}
    return out


@dataclass
class PairedComparison:
    """A method against a reference at matched seeds: the differences and everything computed from them."""

    method: str
    reference: str
    seeds: list
    differences: list[float]
    mean: float
    sd: float
    t_interval: tuple[float, float]
    bootstrap_interval: tuple[float, float]
    t_p: float
    sign_p: float
    permutation_p: float
    below: int  # pairs where method < reference
    above: int
    ties: int

    def to_dict(self) -> dict:
        return asdict(self)


def compare(pairs: dict, method: str = "method", reference: str = "reference", alpha: float = 0.05) -> PairedComparison:
    """Paired statistics of ``pairs = {seed: (method_value, reference_value)}``."""
    if len(pairs) < 2:
        raise ValueError(f"{method} vs {reference}: a paired comparison needs at least 2 matched seeds, got {len(pairs)}")
    seeds = sorted(pairs)
    diffs = [float(pairs[s][0]) - float(pairs[s][1]) for s in seeds]
    mean, sd = _mean_sd(_check(diffs))
    return PairedComparison(
        method=method,
        reference=reference,
        seeds=seeds,
        differences=diffs,
        mean=mean,
        sd=sd,
        t_interval=t_interval(diffs, alpha),
        bootstrap_interval=bootstrap_interval(diffs, alpha),
        t_p=paired_t_test(diffs),
        sign_p=sign_test(diffs),
        permutation_p=permutation_test(diffs),
        below=sum(d < 0 for d in diffs),
        above=sum(d > 0 for d in diffs),
        ties=sum(d == 0 for d in diffs),
    )


# ---------------------------------------------------------------- one trajectory, counted once

# Fields of a metrics row that measure the machine, not the run: two runs of the same
# trajectory differ in them and nowhere else.
TIMING_NAMESPACE = "time/"


def trajectory_key(run_dir: str | Path) -> str:
    """A fingerprint of a run's training trajectory: every metrics row, timings aside.

    Two studies that declare the same config and seed produce the same trajectory bit for bit
    (losses, gradient norms, rewards and dev scores to the last digit); their fingerprints are
    then equal and the run counts once in a pooled table.
    """
    from .checkpoint_rules import run_metric_rows  # the one metrics reader; the statistics above need no torch

    digest = hashlib.sha256()
    for row in run_metric_rows(str(run_dir)):
        timeless = {k: v for k, v in row.items() if not k.startswith(TIMING_NAMESPACE)}
        digest.update(json.dumps(timeless, sort_keys=True).encode())
    return digest.hexdigest()


def distinct(items: list, key) -> tuple[list, list[tuple]]:
    """``items`` with repeats of the same ``key(item)`` dropped (first kept), and the ``(kept, dropped)`` pairs."""
    seen, kept, dropped = {}, [], []
    for item in items:
        k = key(item)
        if k in seen:
            dropped.append((seen[k], item))
        else:
            seen[k] = item
            kept.append(item)
    return kept, dropped
