"""Names a package resolves on first use (PEP 562), so that importing it stays cheap."""

import importlib


def lazy_names(package: str, namespace: dict, where: dict[str, str]):
    """A module ``__getattr__`` for ``package`` that imports ``where[name]`` (a submodule, relative to
    ``package``) the first time ``name`` is read, and caches the value in ``namespace`` (its globals)."""

    def __getattr__(name):
        if name in where:
            value = getattr(importlib.import_module(f".{where[name]}", package), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
