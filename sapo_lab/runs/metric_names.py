"""The names of a ``metrics.jsonl`` row: one namespace per kind of quantity, one producer per key.

A row holds ``step`` and keys ``NAMESPACE/name`` (the cleanrl convention, e.g. ``losses/approx_kl``):

* ``rollout/``  what the step sampled: rewards, verdict reasons, advantage signs, zero-advantage groups,
  response lengths, entropy (:func:`sapo_lab.objective.diagnostics.step_diagnostics`'s names).
* ``ratio/``    importance ratios r = p/b and SAPO's coefficient r w(r) over the trained tokens
  (``q50``, ``pos_q95``, ``rw_q99``, ...; pooled over the K minibatches), and the extreme-ratio counts.
* ``losses/``   the loss and :func:`sapo_lab.policy_loss`'s statistics under their own names
  (``approx_kl``, ``coef_q50``, ``signal_removed_frac``, ``clip_frac``, ...), averaged over the minibatches.
* ``optim/``    the optimizer side: learning rate, gradient norm, tokens trained.
* ``counters/`` the run's totals after this step.
* ``time/``     seconds on this machine (and the non-model share of the step): never compared across machines.
* ``eval/``     dev Pass@1, ``null`` between measurements.
* ``tokseq/``   the token- versus sequence-level gradient comparison, on the steps that made one.

Rows written before the namespaces had flat names. :func:`migrate_row` renames such a row (two of its
keys carried a second meaning, see below); :func:`canonical` resolves a flat name typed in a study
declaration (``"dev_pass1"``, ``"entropy"``) to its key. Flat ``entropy`` was the token-mean entropy
recomputed in float32 next to ``entropy_mean`` (the same mean in float64): only the latter is kept.
Flat ``empty_responses`` was overwritten by the count over the trained minibatches, so an old row's
value becomes ``losses/empty_responses`` and ``rollout/empty_responses`` is rebuilt from the lengths.
"""

from __future__ import annotations

STEP = "step"
NAMESPACES = ("rollout", "ratio", "losses", "optim", "counters", "time", "eval", "tokseq")

DEV_PASS1 = "eval/dev_pass1"
REWARD_MEAN = "rollout/reward_mean"
ELAPSED_S = "time/elapsed_s"
DEV_EVAL_S = "time/dev_eval_s"
TOKENS_GENERATED_TOTAL = "counters/tokens_generated"

# Flat names of rows written before the namespaces, by namespace (the ``ratio_`` and ``total_``
# prefixes and the ``tokseq_`` one are dropped inside their namespace).
_ROLLOUT = ("reward_mean", "reasons", "tokens_generated", "truncated_frac")
_ROLLOUT_PREFIXES = ("adv_", "zero_advantage_", "response_length_", "entropy_")
_OPTIM = ("lr", "grad_norm", "grad_norm_max", "tokens_trained")
_TIME = ("step_s", "elapsed_s", "dev_eval_s", "diagnostics_s", "non_model_frac")
_LOSSES = ("loss", "approx_kl", "clip_frac", "kl_ref", "empty_responses")
_LOSSES_PREFIXES = ("coef_q", "signal_removed_frac", "signal_share_")
_RATIO = ("max_abs_log_ratio", "beyond_max_log_ratio")
_DROPPED = frozenset({"entropy"})  # a float32 duplicate of entropy_mean
_ALIASES = {"entropy": "rollout/entropy_mean"}  # what a declaration's flat name meant


def under(namespace: str, values: dict, *, strip: str = "") -> dict:
    """``values`` with each key put under ``namespace`` (and a leading ``strip`` removed)."""
    if namespace not in NAMESPACES:
        raise ValueError(f"unknown metrics namespace {namespace!r}; one of {NAMESPACES}")
    return {f"{namespace}/{k.removeprefix(strip)}": v for k, v in values.items()}


def _flat_to_key(flat: str) -> str | None:
    """The namespaced key of a flat name, ``None`` for a name no row ever had."""
    if flat == STEP:
        return STEP
    if flat in _ROLLOUT or flat.startswith(_ROLLOUT_PREFIXES):
        return f"rollout/{flat}"
    if flat in _OPTIM:
        return f"optim/{flat}"
    if flat in _TIME:
        return f"time/{flat}"
    if flat in _LOSSES or flat.startswith(_LOSSES_PREFIXES):
        return f"losses/{flat}"
    if flat in _RATIO or flat.startswith("rw_"):
        return f"ratio/{flat}"
    if flat.startswith("ratio_"):
        return f"ratio/{flat.removeprefix('ratio_')}"
    if flat.startswith("total_"):
        return f"counters/{flat.removeprefix('total_')}"
    if flat.startswith("tokseq_"):
        return f"tokseq/{flat.removeprefix('tokseq_')}"
    if flat == "dev_pass1":
        return DEV_PASS1
    return None


def canonical(name: str) -> str:
    """The row key a metric name refers to: a namespaced key as it is, a flat (pre-namespace) name resolved.

    Raises ``ValueError`` naming the metric when it is neither.
    """
    namespace, _, rest = name.partition("/")
    if name == STEP or namespace in NAMESPACES and rest:
        return name
    key = _ALIASES.get(name) or _flat_to_key(name)
    if key is None:
        raise ValueError(f"unknown metric {name!r}: use a namespaced key such as {DEV_PASS1!r} "
                         f"(namespaces: {', '.join(NAMESPACES)})")
    return key


def _is_flat_name(key: str) -> bool:
    return key in _DROPPED or "/" not in key and _flat_to_key(key) not in (None, STEP)


def is_flat(row: dict) -> bool:
    """Whether ``row`` was written before the namespaces (it has a flat name the trainer used to write)."""
    return any(_is_flat_name(k) for k in row)


def migrate_row(row: dict) -> dict:
    """A row written with flat names, renamed to the namespaced keys (a namespaced row is returned as it is).

    Key order is kept, and a key the trainer never wrote (one a user's code added) stays as it
    is. ``entropy`` is dropped (see the module docstring); the rollout's ``empty_responses``,
    which such rows did not keep, is 0 exactly when the shortest response has a token, and a
    row where it could be non-zero is refused rather than guessed.
    """
    if not is_flat(row):
        return row
    out = {}
    for name, value in row.items():
        if name not in _DROPPED:
            out[_flat_to_key(name) if _is_flat_name(name) else name] = value
    if "response_length_min" in row:
        if row["response_length_min"] == 0:
            raise ValueError(f"metrics row of step {row.get(STEP)}: an empty response; its rollout count is not recorded")
        out["rollout/empty_responses"] = 0
    return out
