"""Checkpoints that lose nothing, unpickle nothing and verify themselves.

A checkpoint is a directory ``checkpoints/step-NNNNNN/`` with

* ``model.safetensors``: the policy's weights (tied weights handled by safetensors);
* ``optimizer.safetensors`` + ``optimizer.json``: AdamW's tensors and its scalars;
* ``rng.safetensors``: the byte states of every torch generator the run uses;
* ``state.json``: step, counters and the resolved config;
* ``manifest.json``, written last: size and SHA-256 of each file above.

Everything is written into ``.tmp-step-NNNNNN-PID/``, each file fsynced, the manifest
last, then the directory is fsynced, renamed into place and its parent fsynced, so a
crash or power loss at any moment leaves either the whole new checkpoint or none of it.
``latest.json`` is a hint for people; resuming scans the ``step-*`` folders and takes the
newest one whose files match its manifest (:func:`select_checkpoint`), reporting every
newer one it skipped and why. Loading reads safetensors and JSON only.

A checkpoint written before manifests existed has no ``manifest.json``: it is still
loaded (after a structural check of every file), with a message saying its bytes could
not be verified.
"""

from __future__ import annotations

import json
import os
import shutil

import torch
from safetensors import safe_open
from safetensors.torch import load_file, load_model, save_file, save_model

from .durable import fsync_dir, move, write_json
from .manifest import MANIFEST, verify_manifest, write_manifest
from .run_folder import LATEST, RunFolder, checkpoint_tmp_name, parse_step_dir, step_dir_name

CHECKPOINT_FILES = ("model.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors", "state.json")


class CheckpointError(ValueError):
    """A checkpoint (or a file in it) that cannot be trusted; the message is one line and names the file."""


def check_structure(directory: str, names=CHECKPOINT_FILES) -> str | None:
    """For folders without a manifest: None when each file exists and parses, else one line naming the bad file."""
    for name in names:
        p = os.path.join(directory, name)
        if not os.path.isfile(p):
            return f"{name} is missing"
        try:
            if name.endswith(".safetensors"):
                with safe_open(p, framework="pt") as f:
                    for key in f.keys():
                        f.get_slice(key)
            else:
                with open(p) as f:
                    json.load(f)
        except Exception as exc:  # safetensors raises its own error types
            return f"{name} cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return None


def verify_checkpoint(ckpt_dir: str) -> tuple[bool, str | None]:
    """(verified, problem): (True, None) matches its manifest; (False, None) has no manifest
    but every file parses (an older checkpoint); (False, reason) must not be loaded."""
    if not os.path.isfile(os.path.join(ckpt_dir, MANIFEST)):
        problem = check_structure(ckpt_dir)
        return False, problem
    problem = verify_manifest(ckpt_dir)
    if problem is None:
        missing = [n for n in CHECKPOINT_FILES if not os.path.isfile(os.path.join(ckpt_dir, n))]
        if missing:
            problem = f"{missing[0]} is missing"
    return problem is None, problem


# ---------------------------------------------------------------- optimizer state


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
    """Inverse of :func:`optimizer_to_flat`: load the flat tensors and scalars into ``opt``."""
    state: dict = {}
    for key, v in tensors.items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    for key, v in meta["scalars"].items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


# ---------------------------------------------------------------- save / select / load


def checkpoint_dirs(run_dir: str) -> list[tuple[int, str]]:
    """``[(step, path), ...]`` of the ``checkpoints/step-*`` folders, newest first."""
    root = RunFolder(run_dir).checkpoints
    if not os.path.isdir(root):
        return []
    out = []
    for name in os.listdir(root):
        step = parse_step_dir(name)
        if step is not None and os.path.isdir(os.path.join(root, name)):
            out.append((step, os.path.join(root, name)))
    return sorted(out, reverse=True)


def save_checkpoint(run_dir: str, step: int, model, optimizer, generators: dict, state: dict, keep: int = 2) -> str:
    """Write checkpoint ``step`` durably (manifest last, fsync around the rename) and prune older ones."""
    root = RunFolder(run_dir).checkpoints
    os.makedirs(root, exist_ok=True)
    name = step_dir_name(step)
    final = os.path.join(root, name)
    tmp = os.path.join(root, checkpoint_tmp_name(step))
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_model(model, os.path.join(tmp, "model.safetensors"))
    opt_tensors, opt_meta = optimizer_to_flat(optimizer)
    save_file(opt_tensors, os.path.join(tmp, "optimizer.safetensors"))
    write_json(os.path.join(tmp, "optimizer.json"), opt_meta, sort_keys=True)
    rng = {name: g.get_state() for name, g in generators.items()}
    rng["torch_global"] = torch.get_rng_state()
    save_file(rng, os.path.join(tmp, "rng.safetensors"))
    write_json(os.path.join(tmp, "state.json"), {**state, "step": step}, sort_keys=True)
    write_manifest(tmp)  # fsyncs every file, then the manifest: its presence means "complete"
    fsync_dir(tmp)
    old = None
    if os.path.isdir(final):  # re-saving a step (Ctrl-C right after a save): keep the old one until the new one is in
        old = os.path.join(root, f".old-{name}-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        move(final, old)
    move(tmp, final)
    if old:
        shutil.rmtree(old, ignore_errors=True)
    write_json(os.path.join(root, LATEST), {"checkpoint": name, "step": step}, sort_keys=True)
    for _, path in checkpoint_dirs(run_dir)[keep:] if keep > 0 else []:
        if os.path.basename(path) != name:
            shutil.rmtree(path, ignore_errors=True)
    return final


def checkpoint_step(ckpt_dir: str) -> int:
    """The step recorded in a checkpoint's ``state.json``."""
    with open(os.path.join(ckpt_dir, "state.json")) as f:
        return int(json.load(f)["step"])


def select_checkpoint(run_dir: str) -> tuple[str | None, list[tuple[str, str]], bool]:
    """The newest checkpoint that can be trusted: ``(path or None, skipped, verified)``.

    ``skipped`` lists ``(folder name, reason)`` for each newer checkpoint that failed
    verification; ``verified`` is False when the chosen one predates manifests (it
    parsed, but its bytes could not be checked against recorded hashes).
    """
    skipped = []
    for _, path in checkpoint_dirs(run_dir):
        ok, problem = verify_checkpoint(path)
        if problem is None:
            return path, skipped, ok
        skipped.append((os.path.basename(path), problem))
    return None, skipped, False


def latest_checkpoint(run_dir: str) -> str | None:
    """Path of the newest trustworthy checkpoint of ``run_dir`` (None if there is none)."""
    return select_checkpoint(run_dir)[0]


def latest_hint(run_dir: str) -> tuple[str | None, str | None]:
    """``(checkpoint name, problem)`` from ``checkpoints/latest.json``; it only informs messages."""
    path = os.path.join(RunFolder(run_dir).checkpoints, LATEST)
    if not os.path.isfile(path):
        return None, None
    try:
        with open(path) as f:
            name = json.load(f)["checkpoint"]
        assert isinstance(name, str)
        return name, None
    except (ValueError, KeyError, TypeError, AssertionError):
        return None, "not a JSON object with a 'checkpoint' name"


def load_checkpoint(ckpt_dir: str, model, optimizer, generators: dict) -> dict:
    """Restore model, optimizer and generators in place; returns ``state.json``.

    Raises :class:`CheckpointError` (one line, naming the file) for anything unreadable.
    """
    for f in CHECKPOINT_FILES:
        if not os.path.isfile(os.path.join(ckpt_dir, f)):
            raise CheckpointError(f"checkpoint {ckpt_dir} is incomplete: {f} is missing")
    device = next(model.parameters()).device

    def bad(name, exc):
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return CheckpointError(f"checkpoint {ckpt_dir}: {name} cannot be loaded: {detail}")

    try:
        missing, unexpected = load_model(model, os.path.join(ckpt_dir, "model.safetensors"), device=str(device))
    except Exception as exc:  # safetensors' own error types
        raise bad("model.safetensors", exc) from exc
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {ckpt_dir} does not match the model: missing {missing}, unexpected {unexpected}")
    try:
        with open(os.path.join(ckpt_dir, "optimizer.json")) as f:
            meta = json.load(f)
    except ValueError as exc:
        raise bad("optimizer.json", exc) from exc
    try:
        opt_tensors = load_file(os.path.join(ckpt_dir, "optimizer.safetensors"), device=str(device))
        optimizer_from_flat(optimizer, opt_tensors, meta)
    except Exception as exc:
        raise bad("optimizer.safetensors", exc) from exc
    try:
        rng = load_file(os.path.join(ckpt_dir, "rng.safetensors"))
    except Exception as exc:
        raise bad("rng.safetensors", exc) from exc
    for name, g in generators.items():
        if name not in rng:
            raise CheckpointError(f"checkpoint {ckpt_dir} has no state for generator {name!r}")
        g.set_state(rng[name])
    torch.set_rng_state(rng["torch_global"])
    try:
        with open(os.path.join(ckpt_dir, "state.json")) as f:
            state = json.load(f)
        assert isinstance(state, dict) and "step" in state
    except (ValueError, AssertionError) as exc:
        raise bad("state.json", exc) from exc
    return state
