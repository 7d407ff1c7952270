"""GPT-2 policies: named sizes built from a ``GPT2Config``, or any saved causal LM.

``build_model("cpu-tiny")`` gives a ~1M-parameter GPT-2 for the character tokenizer;
``"gpu-gpt2-small"`` is GPT-2 small's shape (124M with its 50257-token vocabulary).
``load_model_and_tokenizer`` accepts either a size name or a Hugging Face model
directory / hub name, which then brings its own tokenizer.

``response_logprobs`` is the one teacher-forced log-prob function used by the
trainer, the tests and the book.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

from ..runs.manifest import MANIFEST, verify_manifest
from .tokenizer import DEFAULT_ALPHABET, build_char_tokenizer, prepare_tokenizer

# Dropout is off everywhere: the behavior log-probs are recomputed by teacher forcing
# and must match the sampling pass exactly at the first update.
MODEL_SIZES = {
    "cpu-micro": dict(n_embd=32, n_layer=1, n_head=2, n_positions=32),  # tests only
    "cpu-tiny": dict(n_embd=144, n_layer=4, n_head=4, n_positions=32),
    "gpu-gpt2-small": dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257),
}


def build_model(size: str = "cpu-tiny", vocab_size: int | None = None, seed: int | None = None) -> GPT2LMHeadModel:
    """A freshly initialised GPT-2 of a named size (see ``MODEL_SIZES``), dropout off.

    ``vocab_size`` defaults to the character tokenizer's for the CPU sizes and to
    GPT-2's 50257 for ``gpu-gpt2-small``; ``seed`` seeds torch before initialising.
    """
    if size not in MODEL_SIZES:
        raise ValueError(f"unknown model size {size!r}; known sizes: {sorted(MODEL_SIZES)}")
    spec = dict(MODEL_SIZES[size])
    if vocab_size is not None:
        spec["vocab_size"] = vocab_size
    elif "vocab_size" not in spec:  # the CPU sizes are made for the character tokenizer
        spec["vocab_size"] = len(build_char_tokenizer())
    cfg = GPT2Config(
        **spec,
        activation_function="gelu_pytorch_tanh",  # GPT-2's tanh GELU as one fused kernel
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=1,
        eos_token_id=1,
        pad_token_id=0,
    )
    if seed is not None:
        torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg)
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Unique parameters (GPT-2 ties its input and output embeddings)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def load_model_and_tokenizer(path_or_name: str = "cpu-tiny", seed: int | None = None, alphabet: str = DEFAULT_ALPHABET):
    """(model, tokenizer) for a size name, a saved directory or a hub name.

    A size name builds a fresh model with the character tokenizer of ``alphabet`` (the
    task's). Anything else goes through ``AutoModelForCausalLM`` / ``AutoTokenizer``
    (a hub name needs internet) and brings its own tokenizer.
    """
    if path_or_name in MODEL_SIZES:
        tok = build_char_tokenizer(alphabet)
        if path_or_name == "gpu-gpt2-small":
            vocab = MODEL_SIZES[path_or_name]["vocab_size"]  # GPT-2 small's embedding size, char ids below
        else:
            vocab = len(tok)
        return build_model(path_or_name, vocab_size=vocab, seed=seed), tok
    if not os.path.isdir(path_or_name) and (path_or_name.startswith((".", "/")) or os.sep in path_or_name.strip("/")):
        if not os.path.exists(path_or_name):
            raise ValueError(f"model path {path_or_name!r} does not exist (and it is not a size: {sorted(MODEL_SIZES)})")
    if os.path.isdir(path_or_name):
        check_model_folder(path_or_name)
    try:
        tok = AutoTokenizer.from_pretrained(path_or_name)
        model = AutoModelForCausalLM.from_pretrained(path_or_name, use_safetensors=True)
    except (OSError, ValueError, SafetensorError) as exc:
        raise ValueError(f"cannot load model {path_or_name!r}: {str(exc).splitlines()[0]}") from exc
    if len(tok) < 2:  # a tokenizer rebuilt from nothing; sampling would fail much later
        raise ValueError(f"model folder {path_or_name!r} has no usable tokenizer ({len(tok)} token)")
    model.config.use_cache = True
    return model, prepare_tokenizer(tok)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def check_model_folder(path: str) -> None:
    """One-line ValueError unless ``path`` holds a model config, weights and a tokenizer
    (and, when it has a ``manifest.json``, files that match it).

    Without this, ``AutoTokenizer`` quietly builds an empty tokenizer from ``config.json``
    and the run fails much later, in sampling, with a reshape error.
    """
    names = set(os.listdir(path))
    if "config.json" not in names:
        raise ValueError(f"model folder {path!r} has no config.json")
    if not any(n.endswith((".safetensors", ".bin")) or n.endswith(".safetensors.index.json") for n in names):
        raise ValueError(f"model folder {path!r} has no weights (model.safetensors)")
    if not names.intersection(TOKENIZER_FILES):
        raise ValueError(
            f"model folder {path!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
            "save one next to the weights with tokenizer.save_pretrained(folder)"
        )
    if MANIFEST in names:  # written by sapo_lab's save_pretrained_atomic: check the bytes too
        problem = verify_manifest(path)
        if problem:
            raise ValueError(f"model folder {path!r}: {problem}")


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that start at 0 on the first real token, so left padding changes nothing."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def response_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
):
    """Teacher-forced log-probs of the response tokens.

    ``input_ids``, ``attention_mask`` and ``response_mask`` are (batch, prompt+response);
    ``response_mask`` marks the response tokens whose log-probs are wanted. Returns
    ``logp`` shaped (batch, response_len) aligned with the last ``response_len`` columns,
    where ``response_len`` is the width of the response region (columns after the
    prompt). With ``return_entropy`` also returns the per-token entropy of the
    temperature-scaled distribution (no gradient).

    The logits at position t predict token t+1, hence the shift by one.
    """
    if input_ids.shape != attention_mask.shape or input_ids.shape != response_mask.shape:
        raise ValueError(
            f"input_ids, attention_mask and response_mask must share a shape, got "
            f"{tuple(input_ids.shape)}, {tuple(attention_mask.shape)}, {tuple(response_mask.shape)}"
        )
    cols = response_mask.bool().any(dim=0).nonzero()
    if cols.numel() == 0:
        raise ValueError("response_mask selects no token")
    start = int(cols[0])
    if start == 0:
        raise ValueError("a response token cannot be the first column: it needs a prompt token before it")
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
    )
    logits = out.logits[:, start - 1 : -1, :]
    if logits.dtype != torch.float64:  # half-precision logits upcast; float64 (the TRL equivalence test) kept
        logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, start:]
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logp = logp * response_mask[:, start:].to(logp.dtype)
    if return_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy
    return logp
