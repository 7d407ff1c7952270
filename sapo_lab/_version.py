"""The package version (a leaf every layer may import)."""

__version__ = "0.1.0"
