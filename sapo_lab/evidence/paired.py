"""Paired comparisons of two methods over seeds: every statistic the evidence chapters use.

Runs of one seed share a cold start (the same SFT weights, the same data order), so the
seed-to-seed spread of a single method is mostly that shared start. The difference
``method - reference`` at a matched seed and grid cell cancels it; its spread is what
decides whether a gap is noise. Everything here works on those paired differences:

* :func:`t_interval`, :func:`bootstrap_interval`: intervals for the mean difference;
* :func:`paired_t_test`, :func:`sign_test`, :func:`permutation_test`: two-sided p-values;
* :func:`paired_sample_size`, :func:`paired_t_power`: how many pairs a paired t-test needs;
* :func:`holm`: Holm's step-down adjustment for a declared family of tests;
* :func:`pooled_sd`, :func:`two_sample_size`, :func:`two_sample_t_power`: the unpaired design, for contrast;
* :func:`survival_table` (Kaplan-Meier) and :func:`within_group_spearman` (rank correlation, exact p);
* :func:`trajectory_key`, :func:`distinct`: the same run found in two studies counts once.

The t and noncentral t distributions are scipy's; the exact tests enumerate with the
standard library. ``tests/evidence/test_paired.py`` checks them against hand-worked cases.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from scipy import stats

from ..runs.snapshots import run_metric_rows

# ---------------------------------------------------------------- the t distribution


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    return float(stats.t.cdf(t, df))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {p}")
    return float(stats.t.ppf(p, df))


def _noncentral_t_sf(c: float, df: float, ncp: float) -> float:
    """P(T' > c) for a noncentral t with ``df`` degrees of freedom and noncentrality ``ncp``."""
    return float(stats.nct.sf(c, df, ncp))


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


# ---------------------------------------------------------------- sample sizes: unpaired against paired


def pooled_sd(groups) -> tuple[float, int]:
    """Pooled within-group standard deviation of ``groups`` (lists of values) and its degrees of freedom.

    Each group contributes its squared deviations from its own mean and ``len - 1`` degrees of
    freedom, so a shift shared by a whole group (a cell of the grid, a seed) does not count.
    """
    squares, df = 0.0, 0
    for group in groups:
        values = [float(v) for v in group]
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"pooled_sd needs finite values, got {values}")
        if len(values) > 1:
            mean = sum(values) / len(values)
            squares += sum((v - mean) ** 2 for v in values)
            df += len(values) - 1
    if df == 0:
        raise ValueError("a pooled SD needs at least one group of 2 or more values")
    return math.sqrt(squares / df), df


def two_sample_t_power(n: int, effect: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided unpaired (equal-variance) t-test with ``n`` runs per method."""
    if n < 2:
        raise ValueError("power needs at least 2 runs per method")
    if not sd > 0:
        raise ValueError(f"the SD of one method's runs must be > 0, got {sd}")
    return two_sided_t_power(2 * n - 2, abs(effect) / (sd * math.sqrt(2.0 / n)), alpha)


def two_sample_size(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8, max_runs: int = 10000) -> int:
    """The fewest runs per method whose unpaired two-sided t-test reaches ``power`` against ``effect``.

    The counterpart of :func:`paired_sample_size` for independent runs: ``sd`` is
    the spread of one method's runs over seeds, which keeps whatever the seeds share.
    """
    return smallest_n(lambda n: two_sample_t_power(n, effect, sd, alpha), effect, power, max_runs, "runs per method")



# ---------------------------------------------------------------- survival and rank correlation


def survival_table(events, steps) -> list[dict]:
    """Kaplan-Meier estimate of the share of runs whose collapse flag has not fired, at each of ``steps``.

    ``events`` holds one ``(step, flagged)`` per run: a flagged run leaves at its flag step; an
    unflagged one is censored at its last step (it might have been flagged later, had it run
    on). Runs censored at a step count as at risk for that step's flags. Rows: ``step``,
    ``at_risk`` (runs still observed at that step), ``flagged`` (flags up to it) and ``survival``.
    """
    events = [(int(s), bool(f)) for s, f in events]
    if not events:
        raise ValueError("survival_table needs at least one run")
    if any(s < 0 for s, _ in events):
        raise ValueError(f"steps must be >= 0, got {sorted(s for s, _ in events)}")
    flag_steps = sorted({s for s, f in events if f})
    rows = []
    for step in sorted(int(s) for s in steps):
        survival = 1.0
        for u in flag_steps:
            if u > step:
                break
            at_risk = sum(s >= u for s, _ in events)
            survival *= 1.0 - sum(s == u and f for s, f in events) / at_risk
        rows.append({"step": step, "at_risk": sum(s >= step for s, _ in events),
                     "flagged": sum(f and s <= step for s, f in events), "survival": survival})
    return rows


def _mean_ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):  # ties share the mean of the ranks they span
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def _pearson(x: list[float], y: list[float]) -> float:
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        raise ValueError("a rank correlation needs values that are not all equal")
    return sxy / math.sqrt(sxx * syy)


def within_group_spearman(x, y, groups, max_permutations: int = 10**6) -> tuple[float, float]:
    """Spearman's rho of ``x`` and ``y`` after centring both on their group's mean, with its exact p.

    Centring removes a shift shared by a group (runs of one seed share a cold start). The
    null hypothesis is that within each group the pairing of x with y is arbitrary, so the
    two-sided p is the share of within-group permutations of ``y`` whose |rho| reaches the
    observed |rho|. Ties share their mean rank.
    """
    x, y, groups = [float(v) for v in x], [float(v) for v in y], list(groups)
    if not len(x) == len(y) == len(groups) or len(x) < 3:
        raise ValueError(f"x, y and groups need one entry per run and at least 3 runs, got {len(x)}, {len(y)}, {len(groups)}")
    if not all(math.isfinite(v) for v in x + y):
        raise ValueError("within_group_spearman needs finite values")

    def centred(values):
        means = {g: sum(v for v, h in zip(values, groups, strict=True) if h == g) / groups.count(g) for g in set(groups)}
        return [v - means[g] for v, g in zip(values, groups, strict=True)]

    rx, cy = _mean_ranks(centred(x)), centred(y)
    rho = _pearson(rx, _mean_ranks(cy))
    members = [[i for i, g in enumerate(groups) if g == key] for key in dict.fromkeys(groups)]
    if math.prod(math.factorial(len(m)) for m in members) > max_permutations:
        raise ValueError(f"more than {max_permutations} within-group permutations; use fewer runs per group")
    hits = total = 0
    for choice in itertools.product(*(itertools.permutations(m) for m in members)):
        perm = list(range(len(y)))
        for m, p in zip(members, choice, strict=True):
            for i, j in zip(m, p, strict=True):
                perm[i] = j
        total += 1
        hits += abs(_pearson(rx, _mean_ranks([cy[j] for j in perm]))) >= abs(rho) - 1e-12
    return rho, hits / total


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
