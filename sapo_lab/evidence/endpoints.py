"""The names a study's ``analysis`` block may use, in one table.

A declared question names what it compares (``endpoint.metric``, a tuning arm's ``tune_on``) and how
(``test``). :func:`sapo_lab.studies.spec.load_declaration` checks every such name against this table when
the study is declared, so a misspelt name is refused before any run starts (one line, naming the nearest
valid name), and :func:`sapo_lab.evidence.analysis.endpoint_value` reads the same names back from a run.

An endpoint is either a field of the run's ``study_record.json`` (:data:`RECORD_ENDPOINTS`) or a field of
one of the study's declared checkpoint selections, named ``RULE_FIELD`` (:data:`SELECTION_FIELDS`):
``best_dev_eval_pass1`` is the held-out Pass@1 of the checkpoint the ``best_dev`` rule chose, so the
checkpoint an endpoint is read at is part of its name.
"""

from __future__ import annotations

import difflib

RECORD_ENDPOINTS = {
    "final_pass1": "held-out Pass@1 at the run's last step (the trainer's final evaluation)",
    "cold_start_pass1": "held-out Pass@1 of the cold start the run began from",
    "steps": "rollout steps the run took",
    "rollout_tokens": "tokens generated over the run",
    "update_tokens": "tokens trained on over the run",
    "optimizer_steps": "optimizer updates over the run",
    "verifier_calls": "reward-function calls over the run",
    "train_elapsed_s": "the trainer's elapsed seconds (training steps and dev evaluations)",
}
SELECTION_FIELDS = {
    "eval_pass1": "held-out Pass@1 of the checkpoint the rule chose",
    "dev_pass1": "dev Pass@1 at that checkpoint's step",
    "step": "the step the rule chose",
}
TESTS = {"paired_t": "a paired t-test over seeds of method - reference"}


def endpoint_names(selection_rules) -> list[str]:
    """Every endpoint a study with these declared selection rules (each ``{"by": ...}``) can be read on."""
    rules = list(dict.fromkeys(rule["by"] for rule in selection_rules))
    return list(RECORD_ENDPOINTS) + [f"{by}_{field}" for by in rules for field in SELECTION_FIELDS]


def check_name(name, valid, what: str) -> None:
    """A one-line ``ValueError`` unless ``name`` is one of ``valid``, naming the nearest valid name."""
    valid = list(valid)
    if name in valid:
        return
    near = difflib.get_close_matches(str(name), valid, n=1, cutoff=0.0)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise ValueError(f"{what} {name!r} is not a name this study can use{hint} (valid: {', '.join(valid)})")
