"""Retrain the first steps of a committed run, as a script: ``python tests/_retrain_prefix.py RUN OUT STEPS CACHE``.

tests/studies/test_results_reproduce.py runs it in a fresh interpreter because the CPU kernel setting the run needs
(``sapo_lab.runs.kernels``) is read once, when torch loads.
"""

import json
import sys

from sapo_lab.runs.config import config_from_dict
from sapo_lab.training.trainer import train


def main(run: str, out: str, steps: str, cache: str) -> None:
    with open(f"{run}/config.json") as f:
        cfg = config_from_dict(json.load(f))
    # A shorter run is a prefix of the longer one only if the schedule does not look at max_steps.
    assert cfg.optimization.lr_scheduler_type in ("constant", "constant_with_warmup")
    cfg.optimization.max_steps = int(steps)
    cfg.cold_start.cache_dir = cache  # where the cache lives changes no number
    train(cfg, out, log=lambda message: None, progress=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
