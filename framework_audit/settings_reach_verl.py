"""Do verl's SAPO temperatures reach ``compute_policy_loss_sapo``? Compose verl's config as its example scripts do.

Runs in ``framework_audit/.venv-verl-hydra`` (``bash framework_audit/build_verl_hydra.sh``: verl's audit
environment plus Hydra, which composing verl's config needs; no GPU, no Ray workers):

    framework_audit/.venv-verl-hydra/bin/python -m framework_audit.settings_reach_verl

For each way of spelling the temperatures, the run composes verl's ``ppo_trainer`` config with Hydra from the
installed verl's YAML files, runs ``verl.utils.config.validate_config`` (what ``verl.trainer.main_ppo.main``
does before any worker starts), converts the actor section to ``ActorConfig`` with verl's
``omega_conf_to_dataclass`` (what the actor worker does), and calls ``compute_policy_loss_sapo`` with it while
a spy records the argument ``tau * (r - 1)`` of the gate's ``torch.sigmoid`` on ratios the run chose; the
temperatures the loss saw are that argument divided by ``r - 1``. The spellings: the overrides of verl's
own SAPO example scripts (``+actor_rollout_ref.actor.policy_loss.tau_pos``), the same without Hydra's ``+``,
and the ``ActorConfig`` fields that ``compute_policy_loss_sapo`` reads (``actor_rollout_ref.actor.tau_pos``).
The results are written to the ``verl`` section of ``results/conformance/settings_reach.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Not the defaults (1.0, 1.05), so a value that stays at its default is told apart from one that arrived.
ASKED = {"tau_pos": 1.3, "tau_neg": 1.7}

# The rest of the actor / data / trainer settings of examples/sapo_trainer/run_qwen3_8b_fsdp.sh that
# validate_config and ActorConfig read (batch sizes, strategy, group size, GPUs).
EXAMPLE_CONTEXT = [
    "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=False",
    "data.train_batch_size=256",
    "actor_rollout_ref.actor.policy_loss.loss_mode=sapo",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.rollout.n=16",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
]

SPELLINGS = {
    "example_scripts": ["+actor_rollout_ref.actor.policy_loss.tau_pos={tau_pos}",
                        "+actor_rollout_ref.actor.policy_loss.tau_neg={tau_neg}"],
    "policy_loss_without_plus": ["actor_rollout_ref.actor.policy_loss.tau_pos={tau_pos}",
                                 "actor_rollout_ref.actor.policy_loss.tau_neg={tau_neg}"],
    "actor_fields": ["actor_rollout_ref.actor.tau_pos={tau_pos}", "actor_rollout_ref.actor.tau_neg={tau_neg}"],
}

# Read from the repository (the example scripts are not part of the installed package).
EXAMPLE_SOURCES = [
    {"what": "SAPO example script overrides", "repository": "verl-project/verl",
     "path": "examples/sapo_trainer/run_qwen3_8b_fsdp.sh", "lines": "73-75",
     "version": "tag v0.9.0, commit 483b8a009ba3; unchanged at 1dda039b9c63 (2026-08-22)"},
    {"what": "SAPO example script overrides", "repository": "verl-project/verl",
     "path": "examples/sapo_trainer/run_qwen3_30b_a3b_fsdp.sh", "lines": "60-62",
     "version": "tag v0.9.0, commit 483b8a009ba3"},
    {"what": "SAPO example README, key flags", "repository": "verl-project/verl",
     "path": "examples/sapo_trainer/README.md", "lines": "17-18", "version": "tag v0.9.0, commit 483b8a009ba3"},
]

# Installed files: (what, path inside site-packages, first-line pattern, last-line pattern or None)
INSTALLED_SOURCES = [
    ("compute_policy_loss_sapo reads config.tau_pos / tau_neg", "verl/trainer/ppo/core_algos.py",
     r"tau_pos = torch\.as_tensor\(config\.tau_pos", r"tau_neg = torch\.as_tensor\(config\.tau_neg"),
    ("ActorConfig declares tau_pos / tau_neg", "verl/workers/config/actor.py", r"^    tau_pos: float", r"^    tau_neg: float"),
    ("PolicyLossConfig: no temperature field", "verl/workers/config/actor.py", r"^class PolicyLossConfig",
     r"^    rollout_correction: RolloutCorrectionConfig"),
    ("validate_config converts the actor section to ActorConfig", "verl/utils/config.py",
     r"actor_config = omega_conf_to_dataclass\(config\.actor_rollout_ref\.actor\)", None),
    ("main_ppo validates the config before starting workers", "verl/trainer/main_ppo.py", r"^    validate_config\(", None),
]


def _first_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    cause = error.__cause__ or error.__context__
    if cause is not None and type(cause).__name__ not in text:
        text += f" ({type(cause).__name__}: {' '.join(str(cause).split())})"
    return f"{type(error).__name__}: {text}"[:400]


def installed_sources(verl) -> list[dict]:
    """The installed lines behind the finding: line range found by pattern, and the file's SHA-256."""
    site = os.path.dirname(os.path.dirname(os.path.abspath(verl.__file__)))
    found = []
    for what, rel, first, last in INSTALLED_SOURCES:
        path = os.path.join(site, rel)
        with open(path, "rb") as f:
            data = f.read()
        lines = data.decode().splitlines()
        start = next(i for i, line in enumerate(lines, 1) if re.search(first, line))
        end = start if last is None else next(i for i, line in enumerate(lines, 1) if i >= start and re.search(last, line))
        found.append({"what": what, "repository": f"verl {verl.__version__} (installed)", "path": rel,
                      "lines": f"{start}-{end}" if end != start else str(start),
                      "version": f"sha256 {hashlib.sha256(data).hexdigest()[:16]}"})
    return found


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def tau_seen_by_loss(actor_config) -> dict:
    """Call compute_policy_loss_sapo with ``actor_config``; the temperatures its gate used, by advantage sign."""
    import torch
    from verl.trainer.ppo.core_algos import compute_policy_loss_sapo

    ratios = torch.tensor([[1.2, 0.8, 1.5], [0.7, 1.3, 1.1]], dtype=torch.float64)
    old = torch.zeros_like(ratios)
    logp = torch.log(ratios)
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
    mask = torch.ones_like(ratios)
    # filled in place, as the trainer fills it for each mini-batch
    actor_config.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=2)
    args = []
    real_sigmoid = torch.sigmoid

    def sigmoid(x, *a, **k):
        args.append(x.detach().clone())
        return real_sigmoid(x, *a, **k)

    torch.sigmoid = sigmoid
    try:
        compute_policy_loss_sapo(old, logp, adv, mask, config=actor_config)
    finally:
        torch.sigmoid = real_sigmoid
    if len(args) != 1:
        raise RuntimeError(f"expected one gate sigmoid call in compute_policy_loss_sapo, saw {len(args)}")
    tau = args[0] / (torch.exp(logp - old) - 1.0)
    return {"tau_pos": sorted({round(v, 12) for v in tau[adv > 0].tolist()}),
            "tau_neg": sorted({round(v, 12) for v in tau[adv <= 0].tolist()})}


def run_spelling(name: str) -> dict:
    """Compose, validate, convert and call the loss for one spelling of the temperatures."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    overrides = [o.format(**ASKED) for o in SPELLINGS[name]]
    result = {"overrides": overrides, "asked": ASKED, "composed": False, "validated": False,
              "actor_tau_pos": None, "actor_tau_neg": None, "loss_tau_seen": None}
    try:
        cfg = compose(EXAMPLE_CONTEXT + overrides)
    except Exception as e:  # Hydra refuses the override: the run never starts
        result["outcome"] = f"Hydra refuses the override: {_first_line(e)}"
        return _verdict(result)
    result["composed"] = True
    actor = cfg.actor_rollout_ref.actor
    result["composed_values"] = {
        "actor.tau_pos": actor.tau_pos, "actor.tau_neg": actor.tau_neg,
        "actor.policy_loss.tau_pos": OmegaConf.select(actor, "policy_loss.tau_pos"),
        "actor.policy_loss.tau_neg": OmegaConf.select(actor, "policy_loss.tau_neg"),
    }
    try:
        # main_ppo's own call; reference policy and critic: none for GRPO without a KL loss or KL reward
        validate_config(config=cfg, use_reference_policy=False, use_critic=False)
    except Exception as e:
        result["outcome"] = f"verl's startup validation stops the run: {_first_line(e)}"
        return _verdict(result)
    result["validated"] = True
    actor_config = omega_conf_to_dataclass(actor)
    result["actor_tau_pos"], result["actor_tau_neg"] = actor_config.tau_pos, actor_config.tau_neg
    result["loss_tau_seen"] = tau_seen_by_loss(actor_config)
    seen = result["loss_tau_seen"]
    result["outcome"] = f"the loss saw tau_pos {seen['tau_pos']}, tau_neg {seen['tau_neg']}"
    return _verdict(result)


def _verdict(result: dict) -> dict:
    seen = result["loss_tau_seen"]
    result["tau_reached"] = bool(seen) and seen["tau_pos"] == [ASKED["tau_pos"]] and seen["tau_neg"] == [ASKED["tau_neg"]]
    return result


def measure() -> dict:
    import hydra
    import omegaconf
    import verl

    return {
        "level": "configuration, executed: Hydra composition of the installed verl's config, verl's own "
                 "validate_config and ActorConfig conversion, and compute_policy_loss_sapo called with the "
                 "result (no GPU, no Ray workers, no training step)",
        "verl": verl.__version__,
        "hydra": hydra.__version__,
        "omegaconf": omegaconf.__version__,
        "settings": {name: run_spelling(name) for name in SPELLINGS},
        "sources": EXAMPLE_SOURCES + installed_sources(verl),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "conformance", "settings_reach.json"),
                        help="the JSON file whose 'verl' section is (re)written")
    args = parser.parse_args(argv)
    try:
        import hydra  # noqa: F401
        import verl  # noqa: F401
    except ImportError as e:
        print(f"error: {e.name} is not installed here; run bash framework_audit/build_verl_hydra.sh and use "
              "framework_audit/.venv-verl-hydra/bin/python", file=sys.stderr)
        return 2
    from framework_audit.settings_reach import write_section

    warnings.simplefilter("ignore", FutureWarning)  # Hydra 1.3 on omegaconf 2.4: version-string notices
    section = measure()
    write_section(args.out, "verl", section)
    for name, s in section["settings"].items():
        print(f"{name}: reached {s['tau_reached']}: {s['outcome'][:150]}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
