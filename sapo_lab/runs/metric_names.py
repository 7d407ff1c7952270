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

A study declaration may name a metric without its namespace (``"dev_pass1"``, ``"entropy"``, as the
committed declarations do): :func:`canonical` resolves such a flat name to its key. Flat ``entropy``
means the token-mean entropy, ``rollout/entropy_mean``.
"""

from __future__ import annotations

STEP = "step"
NAMESPACES = ("rollout", "ratio", "losses", "optim", "counters", "time", "eval", "tokseq")

DEV_PASS1 = "eval/dev_pass1"
REWARD_MEAN = "rollout/reward_mean"
ELAPSED_S = "time/elapsed_s"
DEV_EVAL_S = "time/dev_eval_s"
TOKENS_GENERATED_TOTAL = "counters/tokens_generated"

# Flat metric names, by namespace (the ``ratio_`` and ``total_`` prefixes and the ``tokseq_`` one
# are dropped inside their namespace).
_ROLLOUT = ("reward_mean", "reasons", "tokens_generated", "truncated_frac")
_ROLLOUT_PREFIXES = ("adv_", "zero_advantage_", "response_length_", "entropy_")
_OPTIM = ("lr", "grad_norm", "grad_norm_max", "tokens_trained")
_TIME = ("step_s", "elapsed_s", "dev_eval_s", "diagnostics_s", "non_model_frac")
_LOSSES = ("loss", "approx_kl", "clip_frac", "kl_ref", "empty_responses")
_LOSSES_PREFIXES = ("coef_q", "signal_removed_frac", "signal_share_")
_RATIO = ("max_abs_log_ratio", "beyond_max_log_ratio")
_ALIASES = {"entropy": "rollout/entropy_mean"}  # what a declaration's flat name means


def under(namespace: str, values: dict, *, strip: str = "") -> dict:
    """``values`` with each key put under ``namespace`` (and a leading ``strip`` removed)."""
    if namespace not in NAMESPACES:
        raise ValueError(f"unknown metrics namespace {namespace!r}; one of {NAMESPACES}")
    return {f"{namespace}/{k.removeprefix(strip)}": v for k, v in values.items()}


def _flat_to_key(flat: str) -> str | None:
    """The namespaced key of a flat metric name, ``None`` for a name that is no metric."""
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

