"""Words the commands print, each compared with a line typed here: the results table's signed gain and
interval, eval's pass@k lines (k = 1 is Pass@1, never an "unbiased pass@1" line), and compare's refusal of
an empty list of seeds or loss types. No model is trained: the scoring is replaced by fixed numbers."""

import io

import pytest

from sapo_lab import cli
from sapo_lab.training import evaluation


def _row(loss_type, seed, cold, cold_ci, final, final_ci, gain, seconds):
    return {"loss_type": loss_type, "seed": seed, "cold_start_pass1": cold, "cold_start_pass1_ci95": cold_ci,
            "final_pass1": final, "final_pass1_ci95": final_ci, "pass1_gain": gain, "train_wall_s": seconds}


def test_the_table_signs_each_gain_and_orders_each_interval():
    """Catches the gain printed without its sign (a fall read as a rise), an interval's ends swapped or one of
    them replaced by the point estimate, and a column fed from another key (cold start for final)."""
    out = io.StringIO()
    cli.print_table([_row("grpo", 7, 0.25, (0.125, 0.375), 0.5, (0.375, 0.625), 0.25, 12.34),
                     _row("sapo", 11, 0.5, (0.25, 0.75), 0.45, (0.2, 0.7), -0.05, 3.0)], file=out)
    lines = out.getvalue().splitlines()
    # typed by hand: loss_type left in 10, seed right in 5, two spaces, each "P% [lo, hi]" left in 24 with
    # the percent right in 5, the gain in points signed in 6 (+25.0 and -5.0), the seconds right in 9
    assert lines[2] == "grpo          7   25.0% [12.5, 37.5]      50.0% [37.5, 62.5]      +25.0     12.3"
    assert lines[3] == "sapo         11   50.0% [25.0, 75.0]      45.0% [20.0, 70.0]       -5.0      3.0"
    assert set(lines[1]) == {"-"} and len(lines[1]) == len(lines[0])


@pytest.fixture
def scored(monkeypatch):
    """``eval`` with its model and scoring replaced: the held-out result is the fixed dict below."""
    result = {"num_samples": 2, "temperature": 0.5, "pass1": 0.5, "pass1_ci95": (0.25, 0.75), "pass@2": 0.75,
              "greedy_accuracy": 0.625, "by_difficulty": {"0": {"pass1": 0.75, "num_prompts": 3},
                                                          "1": {"pass1": 0.125, "num_prompts": 5}}}
    task = type("Task", (), {"verify": staticmethod(lambda *a: (0.0, "wrong"))})()
    monkeypatch.setattr(cli, "_model_for", lambda args, cfg: (None, None, {"eval": [], "dev": []}, task))
    monkeypatch.setattr(evaluation, "held_out_eval", lambda *a, **k: result)
    return result


def test_eval_prints_pass_at_k_for_k_above_one_only(scored, capsys):
    """Catches ``k >= 1`` for ``k > 1`` (a second, "unbiased pass@1" line beside Pass@1, reading a key the
    result does not hold), and the greedy or per-difficulty lines fed from another number."""
    assert cli.main(["eval", "--config", "micro", "--pass_k", "1,2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Pass@1 (2 samples/prompt, T=0.5):  50.0% [25.0, 75.0]",
        "pass@2 (unbiased): 75.0%",
        "greedy accuracy: 62.5%",
        "  difficulty 0: Pass@1 75.0% over 3 prompts",
        "  difficulty 1: Pass@1 12.5% over 5 prompts",
    ]


@pytest.mark.parametrize(("flag", "value"), [("--seeds", ","), ("--loss-types", ",")])
def test_compare_refuses_an_empty_list_on_either_side(flag, value, capsys, tmp_path, monkeypatch):
    """Catches ``and`` for ``or`` in compare's check: an empty --seeds beside loss types (or the reverse) would
    train nothing and write an empty results table."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", "--config", "micro", flag, value]) == 2
    assert capsys.readouterr().err == "error: --loss-types and --seeds must each name at least one value\n"
    assert not (tmp_path / "runs").exists()
