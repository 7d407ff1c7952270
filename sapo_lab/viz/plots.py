"""Training curves from a run's ``metrics.jsonl`` (matplotlib, imported lazily).

The rows are read by :func:`sapo_lab.runs.run_folder.read_metrics`, the one reader of
that file, so a curve and a study's table agree on what a torn or damaged line means.
"""

from __future__ import annotations

import os

from ..runs.metric_names import DEV_PASS1, canonical
from ..runs.run_folder import METRICS, read_metrics

DEFAULT_PANELS = (
    ("rollout/reward_mean", "train reward"),
    ("eval/dev_pass1", "dev Pass@1"),
    ("rollout/entropy_mean", "entropy (nats/token)"),
    ("rollout/response_length_mean", "response length"),
    ("losses/approx_kl", "approx KL (behavior || current)"),
    ("ratio/q95", "ratio q95"),
    ("losses/coef_q50", "r·w(r) median"),
    ("losses/signal_removed_frac", "signal removed"),
    ("optim/grad_norm", "gradient norm"),
)


def curve_rows(path: str) -> list[dict]:
    """The rows of a run's metrics file; ``path`` is the run directory or the file itself."""
    if os.path.isdir(path):
        path = os.path.join(path, METRICS)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such metrics file")
    return read_metrics(path).rows


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
    data = {label: curve_rows(p) for label, p in runs.items()}
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 2.8 * nrows), squeeze=False)
    for ax, (name, title) in zip(axes.flat, panels, strict=False):
        key = canonical(name)
        for label, rows in data.items():
            pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, label=label, marker="o" if key == DEV_PASS1 else None, ms=3)
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
