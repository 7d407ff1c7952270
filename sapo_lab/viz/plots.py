"""Training curves from a run's ``metrics.jsonl`` (matplotlib, imported lazily)."""

from __future__ import annotations

import json
import os

DEFAULT_PANELS = (
    ("reward_mean", "train reward"),
    ("dev_pass1", "dev Pass@1"),
    ("entropy", "entropy (nats/token)"),
    ("response_length_mean", "response length"),
    ("approx_kl", "approx KL (behavior || current)"),
    ("ratio_q95", "ratio q95"),
    ("coef_q50", "r·w(r) median"),
    ("signal_removed_frac", "signal removed"),
    ("grad_norm", "gradient norm"),
)


def read_metrics(path: str) -> list[dict]:
    """Rows of a metrics file; ``path`` may be the run directory."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_training_curves(runs, panels=DEFAULT_PANELS, path: str | None = None, ncols: int = 3):
    """One panel per metric, one line per run. ``runs``: a path, a list of paths or {label: path}.

    Returns the matplotlib figure (saved to ``path`` when given).
    """
    import matplotlib

    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if isinstance(runs, str):
        runs = {os.path.basename(os.path.normpath(runs)): runs}
    elif not isinstance(runs, dict):
        runs = {os.path.basename(os.path.normpath(r)): r for r in runs}
    data = {label: read_metrics(p) for label, p in runs.items()}
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.8 * nrows), squeeze=False)
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        for label, rows in data.items():
            pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, label=label, marker="o" if key == "dev_pass1" else None, ms=3)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("rollout step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig
