"""A module with an error at import time."""
import torch

THRESHOLD = torch.tensor([1.0]) + undefined_name  # noqa: F821
