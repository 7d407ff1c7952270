"""Do the SAPO settings reach the loss of twinkle-kit? SAPOLoss built as its models' ``set_loss`` builds it.

``TransformersModel.set_loss("SAPOLoss", **kwargs)`` (and the Megatron model's) builds the loss instance with
``twinkle.utils.loader.construct_class("SAPOLoss", Loss, twinkle.loss, **kwargs)``: every keyword goes to
``SAPOLoss.__init__``. For each setting this script builds the instance that way, calls it once on a small
off-policy batch with a spy on its gate (``_compute_per_token_loss``, which reads the instance's temperatures),
and reports the temperatures the gate used, next to the ones asked for. Runs in ``framework_audit/.venv-twinkle_kit``
(``bash framework_audit/build_env.sh twinkle_kit``):

    framework_audit/.venv-twinkle_kit/bin/python -m framework_audit.settings_reach_twinkle

The results are written to the ``twinkle_kit`` section of ``results/conformance/settings_reach.json``.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (keyword arguments to set_loss, the temperatures they ask for: tau_pos, tau_neg; None when none are asked)
SETTINGS = {
    "defaults": ({}, None),
    "single_tau_and_clip_range": ({"tau": 1.3, "clip_range": 0.3}, (1.3, 1.3)),
    "tau_pos_and_tau_neg": ({"tau_pos": 1.3, "tau_neg": 1.7}, (1.3, 1.7)),
}
SOURCES = (
    {"what": "set_loss builds the loss with construct_class(loss_cls, Loss, twinkle.loss, **kwargs)",
     "path": "twinkle/model/transformers/transformers.py", "lines": "964-977"},
    {"what": "the Megatron model's set_loss builds it the same way", "path": "twinkle/model/megatron/megatron.py",
     "lines": "704"},
    {"what": "construct_class: a class name found in twinkle.loss is called with the keywords",
     "path": "twinkle/utils/loader.py", "lines": "43-74"},
    {"what": "SAPOLoss.__init__: tau_pos and tau_neg (default 1.0); other keywords passed to GRPOLoss.__init__",
     "path": "twinkle/loss/grpo.py", "lines": "361-379"},
    {"what": "GRPOLoss.__init__: **kwargs accepted and not used", "path": "twinkle/loss/grpo.py", "lines": "28-44"},
)


def _parameters(cls) -> set:
    """The named parameters of a class's constructor and of its bases' (what a keyword can set)."""
    names = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names |= {p.name for p in inspect.signature(init).parameters.values()
                      if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"}
    return names


def measure_one(kwargs: dict, asked) -> dict:
    """Build SAPOLoss from ``kwargs`` as set_loss does, call it once, and read the temperatures its gate used."""
    import torch
    import twinkle.loss
    from twinkle.loss.base import Loss
    from twinkle.utils.loader import construct_class

    out = {"kwargs": kwargs, "asked": None if asked is None else {"tau_pos": asked[0], "tau_neg": asked[1]},
           "dropped": sorted(set(kwargs) - _parameters(twinkle.loss.SAPOLoss))}
    try:
        instance = construct_class("SAPOLoss", Loss, twinkle.loss, **kwargs)
    except Exception as exc:  # a refused keyword is a finding, not a crash
        return {**out, "accepted": False, "error": f"{type(exc).__name__}: {exc}", "tau_seen": None,
                "tau_reached": False}
    seen = {"tau_pos": [], "tau_neg": []}
    gate = instance._compute_per_token_loss

    def spy(ratio, advantages, per_token_logps):
        seen["tau_pos"].append(float(instance.tau_pos))
        seen["tau_neg"].append(float(instance.tau_neg))
        return gate(ratio, advantages, per_token_logps)

    instance._compute_per_token_loss = spy
    logp = torch.tensor([[-1.0, -2.0], [-1.5, -0.5]], requires_grad=True)
    old = logp.detach() - torch.tensor([[0.3, -0.4], [0.5, -0.2]])  # off-policy: the gate's tau matters
    labels = torch.tensor([[1, 1], [1, -100]])
    instance({"labels": labels}, {"logps": logp}, old_logps=old, advantages=torch.tensor([1.0, -1.0]))["loss"]
    seen = {k: sorted(set(v)) for k, v in seen.items()}
    reached = None if asked is None else seen == {"tau_pos": [asked[0]], "tau_neg": [asked[1]]}
    return {**out, "accepted": True, "error": None, "tau_seen": seen, "tau_reached": reached}


def measure() -> dict:
    from importlib.metadata import version

    return {
        "level": ("construction, executed: SAPOLoss built by construct_class as the models' set_loss builds it, "
                  "and one call of the loss with a spy on its gate (no model, no training step)"),
        "twinkle_kit": version("twinkle-kit"),
        "settings": {name: measure_one(kwargs, asked) for name, (kwargs, asked) in SETTINGS.items()},
        "sources": [{**s, "version": f"twinkle-kit {version('twinkle-kit')}"} for s in SOURCES],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "conformance", "settings_reach.json"),
                        help="the JSON file whose 'twinkle_kit' section is (re)written")
    args = parser.parse_args(argv)
    try:
        import twinkle.loss  # noqa: F401
    except ImportError as e:
        print(f"error: {e.name} is not installed here; run bash framework_audit/build_env.sh twinkle_kit and use "
              "framework_audit/.venv-twinkle_kit/bin/python", file=sys.stderr)
        return 2
    from framework_audit.settings_reach import write_section

    section = measure()
    write_section(args.out, "twinkle_kit", section)
    for name, s in section["settings"].items():
        print(f"{name}: {s['kwargs']} -> tau seen {s['tau_seen']}, dropped {s['dropped']}, reached {s['tau_reached']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
