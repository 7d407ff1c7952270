"""The doctor's gate-map line at the edges of the map: a run whose share of signal removed equals the smallest or
the largest share among the map's cells lies inside the map; a hair beyond either lies outside, and the line says
so. The cells' shares are read here from the run files with json (each SAPO method's lowest seed)."""

import json
import statistics
from pathlib import Path

import pytest

from sapo_lab.evidence.doctor_map import map_lines
from sapo_lab.evidence.results import load_study

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "results" / "gate_map" / "runs"
OUTSIDE = "this run's share lies outside the map's cells"


def _first_seed_shares():
    """Each SAPO method's median ``losses/signal_removed_frac`` over its lowest seed's logged steps."""
    lowest = {}
    for run in sorted(RUNS.iterdir()):
        record = json.loads((run / "study_record.json").read_text())
        if json.loads((run / "config.json").read_text())["loss"]["loss_type"] != "sapo":
            continue
        if record["method"] not in lowest or record["seed"] < lowest[record["method"]][0]:
            lowest[record["method"]] = (record["seed"], run)
    shares = {}
    for method, (_, run) in lowest.items():
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        values = [r["losses/signal_removed_frac"] for r in rows if isinstance(r.get("losses/signal_removed_frac"), float)]
        shares[method] = statistics.median(values)
    return shares


@pytest.fixture(scope="module")
def edges():
    shares = _first_seed_shares()
    return min(shares.values()), max(shares.values()), load_study("gate_map")


def test_a_share_at_either_edge_of_the_map_lies_inside_it(edges):
    # catches: `<` for the map's range (a run exactly at the map's smallest or largest share called outside)
    lowest, highest, study = edges
    for activity in (lowest, highest):
        head = map_lines("gate active", activity, study)[0]
        assert OUTSIDE not in head, head
        assert f"here {activity:.2%}" in head


def test_a_share_a_hair_beyond_either_edge_lies_outside_it(edges):
    # catches: the range test dropped or one side of it missing; the line names the map's range, as computed here
    lowest, highest, study = edges
    for activity in (lowest * 0.999, highest * 1.001):
        head = map_lines("gate active", activity, study)[0]
        assert f"{OUTSIDE} ({lowest:.2%} to {highest:.2%})" in head, head


def test_an_on_policy_run_is_told_no_cell_applies(edges):
    # catches: an on-policy run matched to the map's least active cell (its share, 0, is nearest the smallest)
    _, _, study = edges
    head = map_lines("on-policy", 0.0, study)[0]
    assert head.startswith("gate map: no cell is on-policy (its smallest M is 2)") and "nearest" not in head
