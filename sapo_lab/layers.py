"""The package's layers and the imports each may make (checked by tests/test_layers.py).

Lower layers never import higher ones, so the loss library loads with torch alone and
tasks with the standard library. ``viz`` may import ``training`` because its plots read run
folders through the one ``metrics.jsonl`` reader (:mod:`sapo_lab.training.run_folder`); only
``viz.plots`` does, so the book's explorers (``viz.explore``) still load without torch. The
leaves in ``SHARED`` (errors, the version) may be imported by every layer.
"""

SHARED = {"errors", "_version", "_lazy", "layers"}

# layer -> the sapo_lab layers it may import (besides itself)
ALLOWED = {
    "errors": set(),
    "_version": set(),
    "_lazy": set(),
    "layers": set(),
    "objective": set(),
    "tasks": set(),
    "conformance": set(),
    "viz": {"objective", "tasks", "training"},
    "training": {"objective", "tasks"},
    "studies": {"objective", "tasks", "training"},
    "integrations": {"objective", "tasks", "training"},
    "cli": {"objective", "tasks", "training", "studies", "integrations", "conformance"},
    "__main__": {"cli"},
    "__init__": {"objective", "tasks", "training"},
}


def layer_of(module: str) -> str | None:
    """``"sapo_lab.training.update"`` -> ``"training"``; None outside sapo_lab."""
    parts = module.split(".")
    if parts[0] != "sapo_lab":
        return None
    return parts[1] if len(parts) > 1 else "__init__"
