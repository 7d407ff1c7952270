"""A character-level tokenizer for the arithmetic task, as a ``PreTrainedTokenizerFast``.

One token per character keeps the task's answer format transparent: the model sees
exactly the digits the verifier reads. Padding is on the left so that batched
generation continues every prompt from its last real token.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
DEFAULT_ALPHABET = "0123456789+="


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """Tokenizer with ids 0, 1, 2 = pad, eos, unk, then one id per character of ``alphabet``."""
    if len(set(alphabet)) != len(alphabet):
        raise ValueError(f"alphabet has repeated characters: {alphabet!r}")
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()  # join characters without spaces
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
    )
    return tok


def prepare_tokenizer(tok):
    """Make any causal-LM tokenizer usable for batched sampling: a pad token and left padding."""
    if tok.eos_token_id is None:
        raise ValueError(f"tokenizer {type(tok).__name__} has no eos token; the verifier needs one")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token  # GPT-2 convention; pads are masked out everywhere
    tok.padding_side = "left"
    return tok
