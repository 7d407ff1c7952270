"""The package's layers and the imports each may make (checked by tests/package/test_layers.py).

Lower layers never import higher ones, so the loss library loads with torch alone and
tasks with the standard library. ``runs`` owns what a run and a study leave on disk (config,
run and study folders, checkpoints, metric names); ``training`` (the loop and the model)
builds on it. ``viz`` imports ``runs`` only, for the plots' one ``metrics.jsonl`` reader
(:mod:`sapo_lab.runs.run_folder`), and only ``viz.plots`` does, so the book's explorers
(``viz.explore``) still load without torch. ``book_data`` (the committed files a chapter
fetches) checks them with the manifest's file digest (``runs.manifest``, the standard library
alone) and is read by ``evidence``. ``evidence`` (reading a study's results, the statistics and
each study's findings) imports ``runs`` and ``book_data`` only, so a chapter or a reviewer reads the
committed studies without torch or pydantic; ``studies`` (declaring, running and selecting) builds on
``training`` and reads through ``evidence``. The leaves in ``SHARED`` (errors, the version, SAPO's
half-width in closed form) may be imported by every layer.
"""

SHARED = {"errors", "_version", "_lazy", "layers", "half_width"}

# layer -> the sapo_lab layers it may import (besides itself)
ALLOWED = {
    "errors": set(),
    "_version": set(),
    "_lazy": set(),
    "layers": set(),
    "half_width": set(),
    "objective": set(),
    "tasks": set(),
    "conformance": set(),
    "runs": {"objective", "tasks"},
    "_book_data_digest": set(),
    "book_data": {"runs", "_book_data_digest"},
    "viz": {"objective", "tasks", "runs"},
    "training": {"objective", "tasks", "runs"},
    "evidence": {"runs", "book_data"},
    "studies": {"objective", "tasks", "runs", "training", "evidence"},
    "integrations": {"objective", "tasks", "runs", "training"},
    "course": {"objective", "tasks", "runs", "training"},
    "cli": {"objective", "tasks", "runs", "training", "studies", "evidence", "integrations", "conformance", "course"},
    "__main__": {"cli"},
    "__init__": {"objective", "tasks", "runs", "training"},
}


def layer_of(module: str) -> str | None:
    """``"sapo_lab.training.update"`` -> ``"training"``; None outside sapo_lab."""
    parts = module.split(".")
    if parts[0] != "sapo_lab":
        return None
    return parts[1] if len(parts) > 1 else "__init__"
