"""Checkpoints that lose nothing and unpickle nothing.

A checkpoint is a directory ``checkpoints/step-NNNNNN/`` with

* ``model.safetensors``: the policy's weights (tied weights handled by safetensors);
* ``optimizer.safetensors`` + ``optimizer.json``: AdamW's tensors and its scalars;
* ``rng.safetensors``: the byte states of every torch generator the run uses;
* ``state.json``: step, counters and the resolved config.

It is written into a temporary directory and renamed into place, and only then does
``latest.json`` (itself replaced atomically) point to it, so a crash at any moment
leaves the previous checkpoint intact. Loading reads safetensors and JSON only.
"""

from __future__ import annotations

import json
import os
import shutil

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

LATEST = "latest.json"


def _write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def optimizer_to_flat(opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(tensors, json) describing an optimizer's state dict without pickle."""
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{pid}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_flat(opt: torch.optim.Optimizer, tensors: dict, meta: dict) -> None:
    state: dict = {}
    for key, v in tensors.items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    for key, v in meta["scalars"].items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_checkpoint(run_dir: str, step: int, model, optimizer, generators: dict, state: dict, keep: int = 2) -> str:
    """Write checkpoint ``step`` atomically and prune older ones; returns its directory."""
    root = os.path.join(run_dir, "checkpoints")
    os.makedirs(root, exist_ok=True)
    name = f"step-{step:06d}"
    final = os.path.join(root, name)
    tmp = os.path.join(root, f".tmp-{name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_model(model, os.path.join(tmp, "model.safetensors"))
    opt_tensors, opt_meta = optimizer_to_flat(optimizer)
    save_file(opt_tensors, os.path.join(tmp, "optimizer.safetensors"))
    _write_json(os.path.join(tmp, "optimizer.json"), opt_meta)
    rng = {name: g.get_state() for name, g in generators.items()}
    rng["torch_global"] = torch.get_rng_state()
    save_file(rng, os.path.join(tmp, "rng.safetensors"))
    _write_json(os.path.join(tmp, "state.json"), {**state, "step": step})
    if os.path.isdir(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    _write_json(os.path.join(root, LATEST), {"checkpoint": name, "step": step})
    existing = sorted(d for d in os.listdir(root) if d.startswith("step-"))
    for old in existing[:-keep] if keep > 0 else []:
        if old != name:
            shutil.rmtree(os.path.join(root, old), ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str) -> str | None:
    path = os.path.join(run_dir, "checkpoints", LATEST)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        name = json.load(f)["checkpoint"]
    ckpt = os.path.join(run_dir, "checkpoints", name)
    if not os.path.isdir(ckpt):
        raise ValueError(f"{path} points to missing checkpoint {ckpt}")
    return ckpt


def load_checkpoint(ckpt_dir: str, model, optimizer, generators: dict) -> dict:
    """Restore model, optimizer and generators in place; returns ``state.json``."""
    for f in ("model.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors", "state.json"):
        if not os.path.isfile(os.path.join(ckpt_dir, f)):
            raise ValueError(f"checkpoint {ckpt_dir} is incomplete: {f} is missing")
    device = next(model.parameters()).device
    missing, unexpected = load_model(model, os.path.join(ckpt_dir, "model.safetensors"), device=str(device))
    if missing or unexpected:
        raise ValueError(f"checkpoint {ckpt_dir} does not match the model: missing {missing}, unexpected {unexpected}")
    with open(os.path.join(ckpt_dir, "optimizer.json")) as f:
        meta = json.load(f)
    optimizer_from_flat(optimizer, load_file(os.path.join(ckpt_dir, "optimizer.safetensors"), device=str(device)), meta)
    rng = load_file(os.path.join(ckpt_dir, "rng.safetensors"))
    for name, g in generators.items():
        if name not in rng:
            raise ValueError(f"checkpoint {ckpt_dir} has no state for generator {name!r}")
        g.set_state(rng[name])
    torch.set_rng_state(rng["torch_global"])
    with open(os.path.join(ckpt_dir, "state.json")) as f:
        return json.load(f)
