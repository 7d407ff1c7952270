"""The decision's corrected sentences held to intervals, p-values and counts worked out here from the raw run files
(``study_record.json``, ``environment.json``, ``replication.json`` read with json; the t quantile from scipy; the
mean, SD, Holm's step-down, the dev picks and the pooled sample written out plainly). No sapo_lab statistic is used to
make an expected value, so a generator that rounds, pairs or adjusts wrongly cannot vouch for itself."""

import json
import math
import statistics
from pathlib import Path

import pytest
from scipy import stats

from sapo_lab.evidence import decision

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
MINUS = "\u2212"


def _records(folder: Path) -> dict:
    """``{(method, seed): record}`` of every run in a study folder."""
    out = {}
    for path in (folder / "runs").glob("*/study_record.json"):
        record = json.loads(path.read_text())
        out[record["method"], record["seed"]] = record
    return out


def _final(record: dict) -> float:
    return 0.0 if record.get("status") == "diverged" else record["final_pass1"]


def _best_dev(record: dict) -> float:
    (sel,) = [s for s in record["selections"] if s["by"] == "best_dev"]
    return sel["eval"]["weighted"]["pass1"]


def _declaration(name: str) -> dict:
    return json.loads((ROOT / "experiments" / f"{name}.json").read_text())


def _differences(records, method, reference, seeds, value=_final) -> list[float]:
    return [value(records[method, s]) - value(records[reference, s]) for s in seeds]


def _mean_interval(d: list[float]) -> tuple[float, float, float]:
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _p(d: list[float]) -> float:
    n = len(d)
    mean, sd = sum(d) / n, statistics.stdev(d)
    return 2 * stats.t.sf(abs(mean / (sd / math.sqrt(n))), n - 1)


def _text(d: list[float]) -> str:
    mean, lo, hi = _mean_interval(d)
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]".replace("-", MINUS)


def _holm(p: dict[str, float]) -> dict[str, float]:
    """Holm's adjusted p-values: the k-th smallest times (m - k), made non-decreasing, capped at 1."""
    order = sorted(p, key=p.get)
    out, running = {}, 0.0
    for k, name in enumerate(order):
        running = max(running, min(1.0, (len(order) - k) * p[name]))
        out[name] = running
    return out


def _dev_pick(records, methods) -> str:
    def dev(m):
        return statistics.mean(s["dev_pass1"] for (n, _), r in records.items() if n == m
                               for s in r["selections"] if s["by"] == "final")
    return max(methods, key=dev)


@pytest.fixture(scope="module")
def committed(committed_decision):
    ev = committed_decision
    return ev, decision.decision(ev), decision.readme_findings(ev)


@pytest.fixture(scope="module")
def gate_map():
    plan = _declaration("gate_map")
    return _records(RESULTS / "gate_map"), plan


def _map_gap(gate_map, test_id, value=_final):
    records, plan = gate_map
    (t,) = [t for t in plan["analysis"]["tests"] if t["id"] == test_id]
    return _differences(records, t["method"], t["reference"], plan["seeds"], value)


def _g3(gate_map, value=_final):
    records, plan = gate_map
    (tuned,) = [c for c in plan["analysis"]["contrasts"] if c["kind"] == "tuned"]
    picks = [_dev_pick(records, ms) for ms in tuned["arms"].values()]
    return _differences(records, *picks, plan["seeds"], value)


def test_the_tuning_change_is_never_called_a_closing_when_its_interval_holds_zero(committed, gate_map):
    # catches "58% of it closed" (a share of the point estimates) said of a change whose paired interval holds
    # zero, and a change computed from the two intervals instead of seed by seed
    g4c, g3 = _map_gap(gate_map, "G4c"), _g3(gate_map)
    change = [b - a for a, b in zip(g4c, g3, strict=True)]
    _, lo, hi = _mean_interval(change)
    assert lo < 0 < hi  # the committed change holds zero
    _, text, readme = committed
    for shown in (text, readme):
        assert f"the change, {_text(change)} paired by seed (exploratory), holds zero" in shown
        assert "closed" not in shown and "closing" not in shown and "% of it" not in shown


def test_each_map_answer_is_said_at_the_declared_level_only_when_holm_from_the_records_agrees(committed, gate_map):
    # catches a cell said to reach the declared level on its raw p, Holm applied across both families, or the
    # staleness family's qualifier dropped ("SAPO trailed at M = 4, 8 and 16" with no level)
    records, plan = gate_map
    tests = plan["analysis"]["tests"]
    adjusted = {}
    for family in {t["family"] for t in tests}:
        members = {t["id"]: _p(_map_gap(gate_map, t["id"])) for t in tests if t["family"] == family}
        adjusted.update(_holm(members))
    _, text, _ = committed
    where = next(line for line in text.splitlines() if line.startswith("* On "))
    kept = where.split("at the declared level at ", 1)[1].split(")", 1)[0]
    late = where.split("below zero before Holm's adjustment, not after, at ", 1)[1].split(")", 1)[0]
    for t in tests:
        if t["family"] != "staleness":
            continue
        d = _map_gap(gate_map, t["id"])
        _, lo, hi = _mean_interval(d)
        said = f"{t['id']}: {_text(d)}"
        if hi < 0 and adjusted[t["id"]] <= 0.05:
            assert said in kept and said not in late, t["id"]
        elif hi < 0:
            assert said in late and said not in kept, t["id"]
        else:
            assert said not in kept and said not in late, t["id"]
    # the repeat sentence quotes G4c's raw and adjusted p as computed here
    assert f"raw p = {_p(_map_gap(gate_map, 'G4c')):.3f}; Holm-adjusted p = {adjusted['G4c']:.3f}" in text


def test_the_repeat_and_its_original_are_pooled_from_both_seed_sets(committed, gate_map):
    # catches the pooled interval taken over ten seed means or one seed set, and "did not reach the level of the
    # original" said of a repeat whose raw p meets the level the original was tested at alone
    confirm = _records(RESULTS / "confirm_addition")
    (q1,) = [t for t in _declaration("confirm_addition")["analysis"]["tests"] if t["id"] == "Q1"]
    q1_d = _differences(confirm, q1["method"], q1["reference"], _declaration("confirm_addition")["seeds"])
    g4c = _map_gap(gate_map, "G4c")
    _, text, readme = committed
    for shown in (text, readme):
        assert f"pooled over both seed sets, {_text(q1_d + g4c)} (exploratory)" in shown
        assert "did not reach the level of the original" not in shown
    assert _p(g4c) < 0.05  # the raw p meets the 0.05 Q1 was held to: "found a similar gap" needs both means inside
    for a, b in ((q1_d, g4c), (g4c, q1_d)):
        mean, (_, lo, hi) = sum(a) / len(a), _mean_interval(b)
        assert lo <= mean <= hi
    assert "and found a similar gap, below zero before Holm's adjustment and not after" in text


def test_the_replication_is_quoted_with_the_kernels_its_environment_file_names(committed):
    # catches the replication left out of the answer, its interval recomputed from the committed runs instead
    # of the replication's, and kernels typed instead of read from its own environment.json
    (folder,) = [p.parent for p in RESULTS.glob("replications/*/confirm_addition/replication.json")]
    records = _records(folder)
    d = _differences(records, "sapo", "grpo", _declaration("confirm_addition")["seeds"])
    env = json.loads((folder / "environment.json").read_text())["invocations"]
    (kernels,) = {inv["kernel_fingerprint"] for inv in env}
    _, text, readme = committed
    for shown in (text, readme):
        line = next(x for x in shown.split(". ") if "other CPU kernels" in x)
        assert _text(d) in line and f"fingerprint {kernels}" in line and "consistent" in line
    # beside G4c: the same bullet
    assert any("G4c repeats" in b and "other CPU kernels" in b for b in text.split("\n* "))


def test_the_collapse_reading_is_exploratory_and_splits_q2_seeds_from_the_records(committed):
    # catches the M = 16 instability clause stated as a finding, and Q2's collapse pattern left unsaid or split by
    # GRPO's flags instead of SAPO's
    records = _records(RESULTS / "confirm_scratchpad")
    seeds = _declaration("confirm_scratchpad")["seeds"]
    flagged = [s for s in seeds if records["sapo", s]["collapse"]["collapsed"]]
    grpo = [s for s in seeds if records["grpo", s]["collapse"]["collapsed"]]
    gap = {s: _final(records["sapo", s]) - _final(records["grpo", s]) for s in seeds}
    hit = statistics.mean(gap[s] for s in flagged)
    rest = statistics.mean(gap[s] for s in seeds if s not in flagged)
    _, text, _ = committed
    expected = (f"Q2: {len(flagged)} of {len(seeds)} SAPO runs against {len(grpo)} of {len(seeds)} GRPO runs; seeds "
                f"with a flagged SAPO run average {hit:+.3f}, the others {rest:+.3f}").replace("-", MINUS)
    assert expected in text
    assert "(exploratory, read alone: this suggests most of M = 16's gap goes with SAPO's instability" in text


def test_best_dev_readings_against_sapo_are_shown_below_zero(committed, gate_map):
    # catches the table showing only the exploratory readings that favour SAPO: each declared map answer's best-dev
    # interval recomputed from the records' best_dev selections, and listed on the side of zero it falls on
    _, text, _ = committed
    bullet = next(b for b in text.split("\n* ") if b.startswith("Exploratory readings"))
    for_sapo, against = bullet.split("below zero: ", 1)
    for test_id in ("G1", "G2", "G4a", "G4b", "G4c", "G4d"):
        d = _map_gap(gate_map, test_id, _best_dev)
        _, lo, hi = _mean_interval(d)
        said = f"{test_id} at best dev: {_text(d)}"
        assert said in (against if hi < 0 else for_sapo), test_id
    assert f"G3 at best dev: {_text(_g3(gate_map, _best_dev))}" in for_sapo


def test_the_answer_sentence_counts_the_declared_comparisons_by_side(committed, gate_map):
    # catches a choice stated from the means, or counted over the mechanism family (which compares other losses)
    records, plan = gate_map
    sides = {t["id"]: _mean_interval(_map_gap(gate_map, t["id"])) for t in plan["analysis"]["tests"]}
    sides["G3"] = _mean_interval(_g3(gate_map))
    for name in ("confirm_addition", "confirm_scratchpad"):
        declared = _declaration(name)
        recs = _records(RESULTS / name)
        for t in declared["analysis"]["tests"]:
            if t["method"] == "sapo" and t["reference"] == "grpo":
                sides[t["id"]] = _mean_interval(_differences(recs, "sapo", "grpo", declared["seeds"]))
        for arm in declared["analysis"].get("tuning", []):
            picks = [_dev_pick(recs, ms) for ms in arm["arms"].values()]
            sides[arm["id"]] = _mean_interval(_differences(recs, *picks, declared["seeds"]))
    above = sum(lo > 0 for _, lo, _ in sides.values())
    below = sum(hi < 0 for _, _, hi in sides.values())
    ev, text, readme = committed
    sentence = decision.answer_sentence(ev)
    words = "none" if above == 0 else str(above)
    assert (f"SAPO finished above GRPO in {words} of the {len(sides)} declared comparisons of the two and below it "
            f"in {below}") in sentence
    assert above == 0 and "prefer GRPO" in sentence  # the choice follows from no comparison above zero
    assert text.startswith(f"**{sentence}**") and f"* {sentence}" in readme


def test_the_answer_names_where_the_two_tie_from_g4as_interval(committed, gate_map):
    # catches "no difference at M = 2" kept after G4a's interval left zero, or a tie claimed without its regime
    _, lo, hi = _mean_interval(_map_gap(gate_map, "G4a"))
    ev, _, _ = committed
    said = "the two tied at M = 2 with lr 2e-4 shared (G4a)" in decision.answer_sentence(ev)
    assert said == (lo < 0 < hi)
    scope = decision.where_answered(ev)
    assert "M = 8 on addition (Q1) and M = 4 on scratchpad addition (Q2), at the shared lr 2e-4" in scope
    assert "no difference at M = 2 with lr 2e-4 shared (G4a)" in scope


def test_replicates_docstring_says_what_git_and_the_record_show():
    # catches the docstring claiming the rule was declared "before any replication ran" when git's first commit of
    # the module comes after the replication's first run started: both times read here, the minutes worked out
    import subprocess
    from datetime import datetime

    import sapo_lab.studies.replicate as replicate

    log = subprocess.run(["git", "log", "--format=%H %ad", "--date=iso-strict", "--", "sapo_lab/studies/replicate.py"],
                         capture_output=True, text=True, cwd=ROOT)
    if log.returncode != 0 or not log.stdout.strip():
        pytest.skip("not inside a git checkout: the module's first commit cannot be read")
    commit, when = log.stdout.strip().splitlines()[-1].split()
    (folder,) = [p.parent for p in RESULTS.glob("replications/*/confirm_addition/replication.json")]
    env = json.loads((folder / "environment.json").read_text())["invocations"]
    started = min(datetime.fromisoformat(inv["started_utc"]) for inv in env)
    minutes = round((datetime.fromisoformat(when) - started).total_seconds() / 60)
    doc = " ".join(replicate.__doc__.split())
    assert "before any replication ran, and" not in doc and "not declared before any replication ran" in doc
    assert f"({commit[:7]}, {datetime.fromisoformat(when):%H:%M:%S} UTC" in doc
    assert f"{minutes} minutes after" in doc and f"({started:%H:%M:%S} UTC" in doc


def test_the_levels_where_the_two_tie_are_seed_means_recomputed_from_the_records(committed, gate_map):
    # catches the tie stated without levels (a tie at a lower Pass@1 read as a tie at the best one), a level
    # taken from another cell, and the best GRPO configuration read from SAPO's runs; the learning rates are read
    # from each run's config.json
    records, plan = gate_map
    rates = {}
    for path in (RESULTS / "gate_map" / "runs").glob("*_seed20/config.json"):
        config = json.loads(path.read_text())
        rates[path.parent.name.removesuffix("_seed20")] = (config["loss"]["loss_type"],
                                                           config["optimization"]["learning_rate"])
    mean = {m: statistics.mean(_final(records[m, s]) for s in plan["seeds"]) for m in rates}
    smallest = min(lr for _, lr in rates.values())
    (g4a,) = [t for t in plan["analysis"]["tests"] if t["id"] == "G4a"]
    tied = [mean[m] for m, (_, lr) in rates.items() if lr == smallest] + [mean[g4a["method"]], mean[g4a["reference"]]]
    best = max((m for m, (loss, _) in rates.items() if loss == "grpo"), key=mean.get)
    ev, _, _ = committed
    assert (f"seed-mean Pass@1 stayed at or below {max(tied):.3f}, against {mean[best]:.3f} for the map's best GRPO "
            "configuration") in decision.answer_sentence(ev)
