"""The ``gpu-gpt2-small`` model name, built at a CPU test's size.

A test that runs the GPU preset or the GPU benchmark on the CPU proves that the code path works: the preset's
settings reach the trainer, the benchmark's lines are printed. None of that depends on GPT-2 small's 12 layers
of width 768, which cost a CPU over a minute per test; GPT-2 small's shape itself is checked in
``tests/training/test_model.py``. What does set this model apart from the CPU sizes stays: GPT-2's 50257-token
embedding under the character tokenizer, and its 1024 positions.

Imported as ``from _small_gpu_model import shrink_gpu_gpt2_small``.
"""

from __future__ import annotations

# One layer of width 32: the cpu-micro model's trunk.
TRUNK = {"n_embd": 32, "n_layer": 1, "n_head": 2}


def shrink_gpu_gpt2_small(monkeypatch) -> dict:
    """Make ``gpu-gpt2-small`` build with a one-layer trunk for the rest of the test; returns the shape used.

    The vocabulary and positions are read from the real entry, so a change to them still reaches the test.
    """
    from sapo_lab.training.model import MODEL_SIZES

    shape = {**MODEL_SIZES["gpu-gpt2-small"], **TRUNK}
    monkeypatch.setitem(MODEL_SIZES, "gpu-gpt2-small", shape)
    return shape
