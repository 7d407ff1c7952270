"""Do the SAPO settings reach the loss of Axolotl's async GRPO trainer? The TRL runs, on Axolotl's trainer.

Axolotl's ``AsyncGRPOTrainer`` subclasses TRL's ``GRPOTrainer`` and overrides ``_compute_loss`` with its own
copy of TRL's loss, so the runs and the spy of ``settings_reach_trl.py`` apply unchanged: the same tiny model,
settings and two optimizer steps, with ``AsyncGRPOTrainer`` / ``AsyncGRPOConfig`` in place of TRL's classes.
Rollouts are produced synchronously (the config's default ``async_prefetch=False``): the background-thread
producer needs a generation server. Runs in ``framework_audit/.venv-axolotl`` (``bash
framework_audit/build_axolotl.sh``: TRL's environment with the TRL and transformers versions Axolotl pins):

    framework_audit/.venv-axolotl/bin/python -m framework_audit.settings_reach_axolotl

The results are written to the ``axolotl`` section of ``results/conformance/settings_reach.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def trainer_classes():
    """Axolotl's async GRPO trainer and its config class."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # axolotl imports trl.experimental
    from axolotl.core.trainers.grpo.async_trainer import AsyncGRPOConfig, AsyncGRPOTrainer

    return AsyncGRPOTrainer, AsyncGRPOConfig


def measure(work_dir: str) -> dict:
    from importlib.metadata import version

    from framework_audit.settings_reach_trl import measure as measure_trl

    trainer_class, config_class = trainer_classes()
    section = measure_trl(work_dir, trainer_class=trainer_class, config_class=config_class)
    section["axolotl"] = version("axolotl")
    section["rollouts"] = ("synchronous, AsyncGRPOConfig's default async_prefetch=False (the background producer "
                           "needs a generation server)")
    return section


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "conformance", "settings_reach.json"),
                        help="the JSON file whose 'axolotl' section is (re)written")
    args = parser.parse_args(argv)
    try:
        trainer_classes()
    except ImportError as e:
        print(f"error: {e.name} is not installed here; run bash framework_audit/build_axolotl.sh and use "
              "framework_audit/.venv-axolotl/bin/python", file=sys.stderr)
        return 2
    from framework_audit.settings_reach import write_section

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.simplefilter("ignore", FutureWarning)
    with tempfile.TemporaryDirectory() as work_dir:
        section = measure(work_dir)
    write_section(args.out, "axolotl", section)
    for name, s in section["settings"].items():
        print(f"{name}: tau_pos seen {s['tau_pos_seen']}, tau_neg seen {s['tau_neg_seen']}, "
              f"share r != 1 {s['share_r_ne_1']:.3f}, one update per rollout {s['one_update_per_rollout']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
