"""``python -m sapo_lab doctor RUN``: the regime read from real micro runs made here, each regime planted.

Planted by a real run: on-policy (M = 1), gate inert (M = 2, a small learning rate), gate active (M = 4,
the micro learning rate), groups with zero reward spread dominating (a reward every answer gets: no token
is trained), collapse (M = 8 at learning rate 0.5). TRL's ``trainer_state.json`` is planted by hand here
(the TRL environment's tests/test_trl_doctor.py reads a real TRL run). Expected numbers are computed from
the logged files with the standard library, not by the doctor.
"""

import json
import math
import os
import shutil
import statistics

import pytest
from _micro import QUIET, micro, parity_reward

from sapo_lab.cli import main
from sapo_lab.runs.doctor import diagnose, read_run, report

RUNS = {
    "on_policy": ({"optimization.steps_per_generation": 1}, "parity"),
    "inert": ({"optimization.steps_per_generation": 2, "optimization.learning_rate": 1e-3}, "parity"),
    "active": ({}, "spread"),  # the micro run: M = 4, learning rate 1e-2
    "zero_spread": ({}, "constant"),
    "collapse": ({"optimization.steps_per_generation": 8, "optimization.learning_rate": 0.5,
                  "optimization.max_steps": 8}, "parity"),
    "grpo": ({"loss.loss_type": "grpo"}, "spread"),
}


def spread_reward(text, finished, problem):
    """Varies within most groups of the untrained micro model: few groups agree."""
    return float(sum(map(ord, text)) % 2), "wrong"


def constant_reward(text, finished, problem):
    """Every answer gets 1: every group agrees, every advantage is 0."""
    return 1.0, "wrong"


REWARDS = {"parity": parity_reward, "spread": spread_reward, "constant": constant_reward}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from sapo_lab.training.trainer import train

    root = tmp_path_factory.mktemp("doctor")
    out = {}
    for name, (extra, reward) in RUNS.items():
        out[name] = str(root / name)
        train(micro(**extra), out[name], reward_fn=REWARDS[reward], **QUIET)
    return out


def logged(run_dir, key):
    """The finite values of ``key`` in the run's metrics.jsonl, read with json alone."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r[key] for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]


# Catches: on-policy taken as r == 1 exactly (a recomputed float32 forward differs from the sampling one by
# round-off: this run's largest |log r| is about 2e-7), or the comparison reversed (the M = 4 run is not on-policy).
# The bounds on the logged values are stated here (round-off under 1e-6; a moving ratio over 1e-3), not read from
# THRESHOLDS: test_each_threshold_holds_at_an_absolute_anchor pins the thresholds themselves.
def test_on_policy_run(runs):
    reading = diagnose(read_run(runs["on_policy"]))
    assert reading.regime == "on-policy"
    assert max(logged(runs["on_policy"], "ratio/max_abs_log_ratio")) < 1e-6
    assert "SAPO is GRPO here" in reading.lines[0]
    assert diagnose(read_run(runs["active"])).regime != "on-policy"


# Catches: the inert/active comparison reversed, the mean quoted as the median, and an inert run (whose ratios
# move by more than round-off) read as on-policy.
def test_inert_and_active_runs(runs):
    for name, regime in (("inert", "gate inert"), ("active", "gate active")):
        removed = logged(runs[name], "losses/signal_removed_frac")
        median = statistics.median(removed)
        assert (median < 0.01) == (regime == "gate inert"), (name, median)  # the declared 1% boundary
        log = read_run(runs[name])
        reading = diagnose(log)
        assert reading.regime == regime
        assert reading.numbers["signal_removed_median"] == pytest.approx(median, rel=1e-12)
        assert max(logged(runs[name], "ratio/max_abs_log_ratio")) > 1e-3
        assert report(log, reading)[0].startswith(f"verdict: {regime}")


# Catches: the zero-spread share compared in the wrong direction, or a run that trained no token (every
# ratio statistic null, max |log r| logged as 0) read as on-policy.
def test_zero_spread_dominating(runs):
    assert statistics.median(logged(runs["zero_spread"], "rollout/zero_advantage_group_frac")) == 1.0
    reading = diagnose(read_run(runs["zero_spread"]))
    assert reading.regime == "no token trained"
    assert reading.zero_spread_dominates
    assert "groups with zero reward spread dominate" in reading.verdict
    spread = statistics.median(logged(runs["active"], "rollout/zero_advantage_group_frac"))
    assert spread <= 0.5  # at most half the groups agree
    assert not diagnose(read_run(runs["active"])).zero_spread_dominates


# Catches: the collapse signs never computed (or computed on the first rows only); and a healthy run flagged.
def test_collapse(runs):
    entropy = logged(runs["collapse"], "rollout/entropy_mean")
    quarter = len(entropy) // 4
    assert statistics.fmean(entropy[-quarter:]) < 0.1 * statistics.fmean(entropy[:quarter])  # a tenth of its start
    reading = diagnose(read_run(runs["collapse"]))
    assert any(sign.startswith("entropy fell") for sign in reading.collapse_signs)
    assert reading.verdict.endswith("signs of collapse")
    assert diagnose(read_run(runs["active"])).collapse_signs == []


# Catches: a GRPO run's clip reported as SAPO's gate without a word, and SAPO's temperatures shown for a loss
# that has none; the SAPO run gets neither the note nor loses its temperatures.
def test_a_grpo_run_is_told_its_gate_is_the_clip(runs):
    log = read_run(runs["grpo"])
    lines = report(log, diagnose(log))
    assert any("loss_type grpo: its 'gate' is" in line for line in lines)
    assert "τ+" not in lines[-2] and "loss_type grpo" in lines[-2]
    sapo = read_run(runs["active"])
    lines = report(sapo, diagnose(sapo))
    assert not any("its 'gate' is" in line for line in lines) and "τ+ 1 / τ- 1.05" in lines[-2]


def write_trainer_state(folder, rows):
    os.makedirs(folder, exist_ok=True)
    history = [{**r, "step": i + 1, "epoch": 0.1 * (i + 1)} for i, r in enumerate(rows)]
    history.append({"step": len(rows), "train_runtime": 1.0, "train_loss": 0.0})  # the closing row: no step logged
    with open(os.path.join(folder, "trainer_state.json"), "w") as f:
        json.dump({"global_step": len(rows), "log_history": history}, f)


def trl_row(removed=None, max_log=None, zero=0.25, entropy=1.0, reward=0.5, loss=0.1):
    row = {"loss": loss, "grad_norm": 1.0, "learning_rate": 1e-6, "reward": reward, "reward_std": 0.3,
           "frac_reward_zero_std": zero, "entropy": entropy}
    if removed is not None:
        row.update({"sapo/signal_removed_frac": removed, "sapo/max_abs_log_ratio": max_log,
                    "sapo/ratio_q01": math.exp(-max_log), "sapo/ratio_q99": math.exp(max_log),
                    "sapo/gate_weight_mean": 1 - removed})
    return row


# Catches: TRL's names not mapped (every TRL run "ratio not logged"), the closing row read as a step, a
# checkpoint's trainer_state.json not found, a log without the diagnostics given a regime anyway, and the null
# statistics of a window that trained no token read as ratios of 1 (on-policy).
def test_trl_trainer_state(tmp_path):
    plain = tmp_path / "plain"
    write_trainer_state(plain, [trl_row(zero=z) for z in (0.7, 0.8, 0.9)])
    reading = diagnose(read_run(str(plain)))
    assert reading.regime == "ratio not logged"
    assert reading.zero_spread_dominates and reading.numbers["zero_spread_median"] == 0.8
    assert reading.numbers["steps"] == 3

    with_diagnostics = tmp_path / "diag" / "checkpoint-4"
    write_trainer_state(with_diagnostics, [trl_row(removed=r, max_log=0.5) for r in (0.02, 0.03, 0.5)])
    log = read_run(str(tmp_path / "diag"))
    assert log.kind == "trl"
    reading = diagnose(log)
    assert reading.regime == "gate active" and reading.numbers["signal_removed_median"] == 0.03

    on_policy = tmp_path / "on_policy"
    write_trainer_state(on_policy, [trl_row(removed=0.0, max_log=0.0)] * 2)
    assert diagnose(read_run(str(on_policy))).regime == "on-policy"

    collapsing = tmp_path / "collapsing"
    write_trainer_state(collapsing, [trl_row(removed=0.001, max_log=0.01, entropy=e, reward=r)
                                     for e, r in ((2.0, 0.6), (1.0, 0.7), (0.1, 0.2), (0.05, 0.1))])
    reading = diagnose(read_run(str(collapsing)))
    assert reading.regime == "gate inert"
    assert [s.split()[0] for s in reading.collapse_signs] == ["entropy", "reward"]

    untrained = tmp_path / "untrained"  # every group agreed: the diagnostics had no token and TRL logged null
    write_trainer_state(untrained, [{**trl_row(removed=0.0, max_log=0.0, zero=1.0), **dict.fromkeys(
        ["sapo/signal_removed_frac", "sapo/max_abs_log_ratio", "sapo/ratio_q01", "sapo/ratio_q99",
         "sapo/gate_weight_mean"])}] * 2)
    reading = diagnose(read_run(str(untrained)))
    assert reading.regime == "no token trained" and reading.zero_spread_dominates

    nan = tmp_path / "nan"
    write_trainer_state(nan, [trl_row(removed=0.02, max_log=0.5), trl_row(removed=0.02, max_log=0.5, loss=math.nan)])
    assert diagnose(read_run(str(nan))).collapse_signs[0].startswith("loss is not finite at 1 step(s), first at step 2")


# Catches: the regime reading reaching torch or pydantic (runs/__init__ importing the config, the doctor importing
# the loss library for its gate): reading a log must not wait for either. Checked on the real active run.
def test_reading_a_run_needs_neither_torch_nor_pydantic(runs):
    import pathlib

    from _heavy import heavy_modules_after

    code = ("import sys\nfrom sapo_lab.runs.doctor import diagnose, read_run\n"
            "assert diagnose(read_run(sys.argv[1])).regime == 'gate active'")
    root = pathlib.Path(__file__).resolve().parents[2]
    assert heavy_modules_after(code, ("torch", "pydantic"), root, runs["active"]) == []


def run_cli(capsys, *argv):
    code = main(["doctor", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# Catches: a bad input ending in a traceback or in exit 0/1, or an error message over several lines.
def test_bad_input_one_line_exit_2(tmp_path, capsys, runs):
    damaged_config = tmp_path / "damaged_config"
    shutil.copytree(runs["active"], damaged_config)
    (damaged_config / "config.json").write_text("{ not json")
    damaged_metrics = tmp_path / "damaged_metrics"
    shutil.copytree(runs["active"], damaged_metrics)
    text = (damaged_metrics / "metrics.jsonl").read_text().splitlines()
    (damaged_metrics / "metrics.jsonl").write_text("\n".join([text[0], "{oops", *text[1:]]) + "\n")
    damaged_state = tmp_path / "damaged_state"
    damaged_state.mkdir()
    (damaged_state / "trainer_state.json").write_text('{"log_history": 3}')
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = {tmp_path / "missing": "no such folder", empty: "holds no run", a_file: "is not a folder",
             damaged_config: "config.json is damaged", damaged_metrics: "line 2 is damaged",
             damaged_state: "trainer_state.json is damaged"}
    for path, words in cases.items():
        code, out, err = run_cli(capsys, str(path), "--no-map")
        assert code == 2 and out == "", (path, code, out)
        assert err.count("\n") == 1 and words in err, (path, err)


# Catches: the map's lines missing or placed before the verdict, and a map reading on an on-policy run.
def test_cli_verdict_first_then_the_map(capsys, runs):
    code, out, err = run_cli(capsys, runs["on_policy"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("verdict: on-policy")
    assert lines[-2].startswith("gate map: no cell is on-policy")
    assert lines[-1].startswith("scope: the gate map")


@pytest.fixture(scope="module")
def gate_map():
    from sapo_lab.evidence.results import load_study

    return load_study("gate_map")


def first_seed_shares(study_path):
    """Each SAPO method's median signal removed on its lowest finished seed, from the files with json alone."""
    runs_dir = os.path.join(study_path, "runs")
    by_method = {}
    for run_id in sorted(os.listdir(runs_dir)):
        record_path = os.path.join(runs_dir, run_id, "study_record.json")
        if not os.path.isfile(record_path):
            continue
        with open(record_path) as f:
            record = json.load(f)
        with open(os.path.join(runs_dir, run_id, "config.json")) as f:
            if json.load(f)["loss"]["loss_type"] != "sapo":
                continue
        seed, method = record["seed"], record["method"]
        if method not in by_method or seed < by_method[method][0]:
            by_method[method] = (seed, run_id)
    return {m: statistics.median(logged(os.path.join(runs_dir, run_id), "losses/signal_removed_frac"))
            for m, (_, run_id) in by_method.items()}


def nearest_settings(gate_map, shares, activity):
    """The settings text of the SAPO method whose share is nearest ``activity`` on a log scale."""
    nearest = min(shares, key=lambda m: abs(math.log10(max(shares[m], 1e-6)) - math.log10(activity)))
    with open(os.path.join(gate_map.path, "runs", f"{nearest}_seed{min(gate_map.declaration['seeds'])}",
                           "config.json")) as f:
        cfg = json.load(f)
    return nearest, (f"SAPO τ+ {cfg['loss']['sapo_temperature_pos']:g}, lr {cfg['optimization']['learning_rate']:g}, "
                     f"M = {cfg['optimization']['steps_per_generation']}")


# Catches: the nearest cell chosen on a linear scale (the second activity lies between two cells' shares, nearer
# the upper one on a log scale and the lower one on a linear scale), from another seed's run, or a cell's
# settings misread.
def test_map_names_the_nearest_cell(gate_map, runs):
    from sapo_lab.evidence.doctor_map import map_lines

    shares = first_seed_shares(str(gate_map.path))
    ordered = sorted(shares.values())
    low, high = max(zip(ordered[:-1], ordered[1:], strict=True), key=lambda pair: pair[1] / pair[0])
    between = ((low + high) / 2 + math.sqrt(low * high)) / 2
    for activity in (diagnose(read_run(runs["active"])).numbers["signal_removed_median"], between):
        nearest, expected = nearest_settings(gate_map, shares, activity)
        head, scope = map_lines("gate active", activity, gate_map)
        assert expected in head, (head, nearest)
        assert f"there {shares[nearest]:.2%}" in head and "outside" not in head
    assert f"{len(gate_map.declaration['seeds'])} paired seeds a cell" in scope
    beyond = map_lines("gate active", 10 * max(shares.values()), gate_map)[0]
    assert "outside the map's cells" in beyond


def test_doctor_outside_a_checkout_reads_the_run_and_says_the_map_is_not_here(tmp_path, monkeypatch, capsys):
    """From the outside test: run from a folder with no results/ above it (a pip install, a TRL folder elsewhere),
    the map lines raised FileNotFoundError after the verdict. Now the reading stands and one line says why no map."""
    from pathlib import Path

    from sapo_lab.cli import main

    run = Path(__file__).resolve().parents[2] / "results" / "confirm_addition" / "runs" / "sapo_seed10"
    monkeypatch.chdir(tmp_path)
    import sapo_lab.evidence.doctor_map as doctor_map

    def no_results(*args, **kwargs):
        raise FileNotFoundError("no results/ folder next to an experiments/ folder above " + str(tmp_path))

    monkeypatch.setattr(doctor_map, "map_lines", no_results)  # what a machine without the results meets
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verdict: ") and "gate map: not found here" in out


@pytest.mark.parametrize(("key", "value"), [("losses/signal_removed_frac", -5.0), ("losses/signal_removed_frac", 50.0),
                                            ("ratio/q01", -0.5), ("rollout/zero_advantage_group_frac", 1.5)])
def test_a_logged_value_outside_its_range_is_a_damaged_log(tmp_path, capsys, key, value):
    """From the outside test: a share of -500% read as 'gate inert'. Catches a regime named from impossible values."""
    import json
    import shutil
    from pathlib import Path

    from sapo_lab.cli import main

    run = Path(__file__).resolve().parents[2] / "results" / "confirm_addition" / "runs" / "sapo_seed10"
    shutil.copy(run / "config.json", tmp_path / "config.json")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows[3][key] = value
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["doctor", str(tmp_path), "--no-map"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is damaged" in err and "step 4" in err and err.count("\n") == 1, err


def _reading(tmp_path, name, rows):
    folder = tmp_path / name
    write_trainer_state(folder, rows)
    return diagnose(read_run(str(folder)))


# Each threshold bracketed by values stated here, not read from THRESHOLDS (a table loosened or tightened there
# would move every test that reads its bounds from it). Catches: the on-policy bound loosened past 2e-4 (a ratio
# moving by 0.02% is not round-off) or tightened under 5e-5 (float32 round-off is about 1e-7); the inert share
# moved off 1%; zero-spread groups said to dominate at exactly half (they must be more than half); the entropy
# collapse ratio moved off 0.1; reward collapse measured against the first quarter instead of the best.
def test_each_threshold_holds_at_an_absolute_anchor(tmp_path):
    assert _reading(tmp_path, "round_off", [trl_row(removed=0.0, max_log=5e-5)] * 2).regime == "on-policy"
    assert _reading(tmp_path, "moving", [trl_row(removed=0.0, max_log=2e-4)] * 2).regime == "gate inert"
    assert _reading(tmp_path, "inert", [trl_row(removed=0.009, max_log=0.1)] * 2).regime == "gate inert"
    assert _reading(tmp_path, "active", [trl_row(removed=0.011, max_log=0.1)] * 2).regime == "gate active"
    assert not _reading(tmp_path, "half", [trl_row(zero=0.5)] * 3).zero_spread_dominates
    assert _reading(tmp_path, "over_half", [trl_row(zero=0.51)] * 3).zero_spread_dominates

    def collapse(name, entropy, reward):
        rows = [trl_row(removed=0.02, max_log=0.1, entropy=e, reward=r) for e, r in zip(entropy, reward, strict=True)]
        return [sign.split()[0] for sign in _reading(tmp_path, name, rows).collapse_signs]

    steady = (0.5, 0.5, 0.5, 0.5)
    assert collapse("entropy_fell", (1.0, 1.0, 1.0, 0.09), steady) == ["entropy"]
    assert collapse("entropy_held", (1.0, 1.0, 1.0, 0.11), steady) == []
    # the reward rose to 0.8 and fell to under half of it, though not under half of where it started (0.2)
    assert collapse("reward_fell", (1.0,) * 4, (0.2, 0.8, 0.8, 0.39)) == ["reward"]
    assert collapse("reward_held", (1.0,) * 4, (0.2, 0.8, 0.8, 0.41)) == []


# Catches: the oldest checkpoint's trainer_state.json read (a stale log), and checkpoints ordered by their names
# (checkpoint-10 sorts before checkpoint-2 as text).
def test_a_trl_folder_is_read_from_its_newest_checkpoint_by_step(tmp_path):
    write_trainer_state(tmp_path / "checkpoint-2", [trl_row(removed=0.02, max_log=0.5)] * 2)
    write_trainer_state(tmp_path / "checkpoint-10", [trl_row(removed=0.02, max_log=0.5)] * 10)
    (tmp_path / "checkpoint-11").mkdir()  # a checkpoint still being written holds no trainer_state.json yet
    log = read_run(str(tmp_path))
    assert len(log.steps) == 10


# Catches: the cell's interval labelled with alpha ("5% t interval") instead of its level; the level is read here
# from the study's declaration file with json, not from the study object the map line is built from.
def test_the_map_line_labels_the_interval_with_the_declared_level(gate_map, runs):
    from sapo_lab.evidence.doctor_map import map_lines

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "experiments", "gate_map.json")) as f:
        alpha = json.load(f)["analysis"]["alpha"]
    assert alpha == 0.05
    head = map_lines("gate active", diagnose(read_run(runs["active"])).numbers["signal_removed_median"], gate_map)[0]
    assert "(95% t interval, " in head and "(5% t interval" not in head, head


def _sapo_lab_run(folder, loss_type, entropy=(1.0, 1.0, 1.0, 1.0)):
    """A sapo_lab run folder written by hand: an active gate (5% of the signal removed) at every step."""
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"loss": {"loss_type": loss_type, "sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05},
                   "optimization": {"steps_per_generation": 4, "learning_rate": 2e-4}}, f)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        for step, e in enumerate(entropy, start=1):
            f.write(json.dumps({"step": step, "ratio/max_abs_log_ratio": 0.1, "ratio/q01": 0.95, "ratio/q99": 1.05,
                                "losses/signal_removed_frac": 0.05, "rollout/entropy_mean": e,
                                "rollout/reward_mean": 0.5, "rollout/zero_advantage_group_frac": 0.1}) + "\n")
    return read_run(str(folder))


def test_every_sapo_variant_keeps_its_gate_and_only_the_clips_are_told_otherwise(tmp_path):
    # catches: a directional SAPO run told its gate is a clip (the note keyed on loss_type == "sapo" exactly):
    # sapo_directional gates with SAPO's sigmoid too; gspo's kernel is a clip and gets the note
    for loss_type, told in (("sapo", False), ("sapo_directional", False), ("gspo", True), ("grpo", True)):
        log = _sapo_lab_run(tmp_path / loss_type, loss_type)
        lines = report(log, diagnose(log))
        assert lines[0] == "verdict: gate active"
        assert any(f"loss_type {loss_type}: its 'gate' is the kernel" in line for line in lines) is told, loss_type


def test_entropy_collapse_is_a_fraction_of_the_first_quarter_not_an_absolute_level(tmp_path):
    # catches: entropy collapse compared with the bare fraction 0.1 instead of 0.1 x the first quarter's entropy:
    # from 2.0 to 0.15 is under a tenth (0.2) of where it started, from 2.0 to 0.25 is not
    fell = diagnose(_sapo_lab_run(tmp_path / "fell", "sapo", entropy=(2.0, 2.0, 2.0, 0.15)))
    held = diagnose(_sapo_lab_run(tmp_path / "held", "sapo", entropy=(2.0, 2.0, 2.0, 0.25)))
    assert [s.split()[0] for s in fell.collapse_signs] == ["entropy"] and held.collapse_signs == []
