"""Reading studies as paired evidence: the declared primary tests and the cross-study table.

:mod:`sapo_lab.evidence.paired` holds the statistics; this module finds the pairs. Two runs form a
pair when their resolved configs agree in everything but the ``loss`` section (so the seed,
the cold start, the data order, the task, the budget and the evaluation protocol are the
same) and one is the method, the other the reference. A study's ``analysis`` block
(:mod:`sapo_lab.studies.spec`) names its primary tests; :func:`primary_results` computes them in
the declared order, Holm-adjusting declared families. :func:`matched_pairs` pools pairs
across studies and keeps each trajectory once (studies that declare the same config and
seed reproduce the same run bit for bit).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..runs.identity import run_identity
from .endpoints import SELECTION_FIELDS
from .paired import compare, distinct, holm, trajectory_key
from .results import Run, Study


def run_config(run: Run) -> dict:
    """The run's resolved config (:attr:`Run.config`)."""
    return run.config


def pairing_key(config: dict) -> str:
    """Everything that must agree for two runs to be a pair: the config without its loss section and cache path."""
    rest = run_identity(config)
    rest.pop("loss", None)
    return json.dumps(rest, sort_keys=True)


# A run stopped by a non-finite loss has no final evaluation and leaves no usable policy: its final
# endpoints score 0, and it stays in its pair (the rule experiments/gate_map.json declares).
DIVERGED_SCORES = {"final_pass1": 0.0, "final_dev_pass1": 0.0}


def endpoint_value(run: Run, metric: str) -> float:
    """``metric`` of a run: a ``study_record.json`` field, or a selection's eval (``best_dev_eval_pass1``...);
    the names are :mod:`sapo_lab.evidence.endpoints`' table.

    A diverged run scores :data:`DIVERGED_SCORES` on the final endpoints; it has no selected checkpoints.
    """
    if run.record.get("status") == "diverged" and metric in DIVERGED_SCORES:
        return DIVERGED_SCORES[metric]
    if metric in run.record and run.record[metric] is not None:
        return float(run.record[metric])
    for sel in run.record.get("selections", []):
        for field in SELECTION_FIELDS:
            if metric == f"{sel['by']}_{field}":
                value = sel.get("eval", {}).get("weighted", {}).get("pass1") if field == "eval_pass1" else sel.get(field)
                if value is not None:
                    return float(value)
    raise KeyError(f"run {run.run_id} has no value for {metric!r}")


@dataclass
class Pair:
    """A method run and a reference run with the same seed and config apart from the loss."""

    study: str
    cell: dict
    seed: int
    method: Run
    reference: Run

    def difference(self, metric: str) -> float:
        return endpoint_value(self.method, metric) - endpoint_value(self.reference, metric)

    def fingerprint(self) -> tuple[str, str]:
        return trajectory_key(self.method.path), trajectory_key(self.reference.path)


def pairs_in_study(study: Study, method: str, reference: str, cell: dict | None = None) -> list[Pair]:
    """Pairs of ``method`` and ``reference`` in one study, at the grid ``cell`` (leaf names; {} = every cell)."""
    out = []
    for run in study.select(method, **(cell or {})):
        key = pairing_key(run_config(run))
        for ref in study.select(reference, **(cell or {})):
            if ref.seed == run.seed and ref.grid == run.grid and pairing_key(run_config(ref)) == key:
                out.append(Pair(study.name, dict(run.grid), run.seed, run, ref))
    return out


def primary_results(study: Study) -> list[dict]:
    """The study's declared primary tests and tuning arms, in declaration order, each with its paired statistics.

    Each entry is the declared test plus ``status`` ("complete", or "pending: ..." while any
    declared seed is unfinished; a pending test has no statistics), ``comparison``
    (:class:`~sapo_lab.evidence.paired.PairedComparison`), ``p`` (the paired t-test's) and, once
    complete, ``p_adjusted`` and ``reject`` (:func:`adjust_families`: Holm within a declared family once the
    whole family is complete, else raw).
    """
    plan = study.declaration.get("analysis")
    if plan is None:
        raise ValueError(f"study {study.name} declares no analysis block")
    metric, alpha = plan["endpoint"]["metric"], plan["alpha"]
    declared = len(study.declaration["seeds"])

    def paired(method, reference, cell=None):
        pairs = pairs_in_study(study, method, reference, cell)
        if len(pairs) < declared:  # no test on part of the data: that would be peeking
            return None, f"pending: {len(pairs)} of {declared} pairs finished"
        values = {p.seed: (endpoint_value(p.method, metric), endpoint_value(p.reference, metric)) for p in pairs}
        return compare(values, method, reference, alpha), "complete"

    results = []
    for test in plan["tests"]:
        cmp, status = paired(test["method"], test["reference"], test.get("cell"))
        results.append({**test, "status": status, "comparison": cmp, "p": cmp.t_p if cmp else None})
    for arm in plan.get("tuning", []):
        chosen, missing = choose_tuned(study, arm["arms"], arm["tune_on"], declared)
        first, second = list(arm["arms"])
        entry = {**arm, "chosen": chosen, "status": f"pending: {missing} runs of the arms unfinished",
                 "comparison": None, "p": None}
        if missing == 0:
            cmp, status = paired(chosen[first], chosen[second])
            entry.update(status=status, comparison=cmp, p=cmp.t_p if cmp else None)
        results.append(entry)
    adjust_families(results, alpha)
    return results


def choose_tuned(study: Study, arms: dict, tune_on: str, declared: int) -> tuple[dict, int]:
    """Each arm's chosen method, the one with the best seed-mean ``tune_on`` (ties: the first declared), and how
    many of the arms' declared runs are unfinished (``(chosen, missing)``; an arm with no finished run chooses None).

    The one tuning rule, for a declared tuning arm here and a tuned contrast (:mod:`sapo_lab.evidence.contrasts`).
    """
    chosen, missing = {}, 0
    for name, methods in arms.items():
        means = {}
        for m in methods:
            runs = study.select(m)
            missing += declared - len(runs)
            if runs:
                means[m] = sum(endpoint_value(r, tune_on) for r in runs) / len(runs)
        chosen[name] = max(means, key=means.get) if means else None  # max keeps the first of equal means
    return chosen, missing


def adjust_families(results: list[dict], alpha: float) -> None:
    """Set ``p_adjusted`` and ``reject`` on each complete entry: Holm within its declared family, else its raw p.

    A family is adjusted only once every member is complete: Holm over the finished part would divide
    alpha among fewer questions than were declared. Until then its finished members get ``p_adjusted``
    and ``reject`` None and ``waiting_for``, the ids still pending.
    """
    families: dict[str, list[dict]] = {}
    for r in results:
        if r.get("family"):
            families.setdefault(r["family"], []).append(r)
        elif r["p"] is not None:
            r["p_adjusted"], r["reject"] = r["p"], r["p"] < alpha
    for members in families.values():
        pending = [r["id"] for r in members if r["p"] is None]
        if pending:
            for r in members:
                if r["p"] is not None:
                    r["p_adjusted"], r["reject"], r["waiting_for"] = None, None, pending
            continue
        adjusted = holm({r["id"]: r["p"] for r in members}, alpha)
        for r in members:
            r["p_adjusted"], r["reject"] = adjusted[r["id"]]["p_adjusted"], adjusted[r["id"]]["reject"]


def matched_pairs(studies: list[Study], is_method, is_reference, where=None) -> tuple[list[Pair], list[tuple]]:
    """Pairs across ``studies`` (runs matched by :func:`pairing_key`), each trajectory pair once.

    ``is_method(config)`` / ``is_reference(config)`` pick the two sides from a run's resolved
    config (e.g. ``loss.loss_type == "sapo"`` with the default temperatures); ``where(config)``
    keeps only some cells (e.g. stale minibatches). Returns the distinct pairs and the
    ``(kept, dropped)`` duplicates.
    """
    sides: dict[str, dict[str, list]] = {}
    for study in studies:
        for run in study.runs:
            cfg = run_config(run)
            if where is not None and not where(cfg):
                continue
            side = "method" if is_method(cfg) else "reference" if is_reference(cfg) else None
            if side:
                sides.setdefault(pairing_key(cfg), {"method": [], "reference": []})[side].append((study, run))
    # within a bucket the seed, task, budget and evaluation agree, so every method run pairs with
    # every reference run; copies of one trajectory in several studies then collapse to one pair
    pairs = [
        Pair(study.name if study.name == ref_study.name else f"{study.name}+{ref_study.name}", dict(run.grid), run.seed, run, ref)
        for bucket in sides.values()
        for study, run in bucket["method"]
        for ref_study, ref in bucket["reference"]
    ]
    return distinct(pairs, Pair.fingerprint)


# ---------------------------------------------------------------- collapse timing, split overlap


def flag_time(run: Run) -> tuple[int, bool]:
    """``(step, flagged)``: when the study's declared collapse rule first fired, else the run's last step."""
    collapse = run.record.get("collapse") or {}
    if collapse.get("collapsed"):
        return int(collapse["step"]), True
    return int(run.record["steps"]), False


def split_overlap(splits: dict) -> dict:
    """How near the eval split lies to what training saw (the review's contamination check, on a task's splits).

    Counts, over the eval problems: ``exact`` (the prompt is a training prompt), ``commuted``
    (an addition ``a+b`` with a != b whose twin ``b+a`` is a training prompt, out of
    ``additions`` such prompts) and ``answer`` (the final answer, the text after the last
    "=", is also some training problem's final answer).
    """
    def twin(prompt):
        m = re.fullmatch(r"(\d+)\+(\d+)(\D*)", prompt)
        return None if m is None or m[1] == m[2] else f"{m[2]}+{m[1]}{m[3]}"

    def final(answer):
        return answer.rsplit("=", 1)[-1]

    train = {p.prompt for p in splits["train"]}
    answers = {final(p.answer) for p in splits["train"]}
    twins = [twin(p.prompt) for p in splits["eval"]]
    return {"eval": len(splits["eval"]), "exact": sum(p.prompt in train for p in splits["eval"]),
            "additions": sum(t is not None for t in twins), "commuted": sum(t in train for t in twins if t),
            "answer": sum(final(p.answer) in answers for p in splits["eval"])}


def cold_start_means(pairs: list[Pair], metric: str) -> dict[str, float]:
    """The mean paired difference per cold start: pairs of one cold start share it, so each counts once."""
    groups: dict[str, list[float]] = {}
    for p in pairs:
        groups.setdefault(p.method.cold_start_key, []).append(p.difference(metric))
    return {k: sum(v) / len(v) for k, v in groups.items()}
