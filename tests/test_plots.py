import json

from sapo_lab.viz.plots import plot_training_curves, read_metrics


def test_training_curves_from_metrics_file(tmp_path):
    rows = [
        {"step": s, "reward_mean": s / 10, "dev_pass1": None if s % 2 else s / 10, "entropy": 1 - s / 10} for s in range(1, 6)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_metrics(str(tmp_path)) == rows
    out = tmp_path / "curves.png"
    fig = plot_training_curves({"sapo": str(tmp_path)}, path=str(out))
    assert out.stat().st_size > 1000 and len(fig.axes) >= 9
