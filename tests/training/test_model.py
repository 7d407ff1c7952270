import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from sapo_lab.training.model import (
    MODEL_SIZES,
    build_model,
    count_parameters,
    load_model_and_tokenizer,
    position_ids_from_mask,
    response_logprobs,
)
from sapo_lab.training.tokenizer import build_char_tokenizer


def test_char_tokenizer_roundtrip_and_special_tokens(tmp_path):
    tok = build_char_tokenizer()
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert tok.padding_side == "left"
    ids = tok("12+3=", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and tok.decode(ids) == "12+3="
    batch = tok(["1+1=", "12+34="], padding=True, add_special_tokens=False)
    assert batch["input_ids"][0][:2] == [0, 0] and batch["attention_mask"][0][:2] == [0, 0]
    assert tok.decode(tok("a")["input_ids"], skip_special_tokens=False) == "<unk>"
    tok.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    back = AutoTokenizer.from_pretrained(tmp_path)
    assert back.padding_side == "left" and back("12+3=")["input_ids"] == ids


def test_tokenizer_rejects_repeated_alphabet():
    with pytest.raises(ValueError, match="repeated"):
        build_char_tokenizer("112")


def test_sizes():
    m = build_model("cpu-tiny", vocab_size=15)
    assert 0.8e6 < count_parameters(m) < 1.3e6
    assert m.config.resid_pdrop == 0 and m.config.attn_pdrop == 0 and m.config.embd_pdrop == 0
    assert MODEL_SIZES["gpu-gpt2-small"]["n_layer"] == 12
    with pytest.raises(ValueError, match="unknown model size"):
        build_model("huge")


def test_gpt2_small_shape_is_124m():
    cfg = GPT2Config(**MODEL_SIZES["gpu-gpt2-small"])
    with torch.device("meta"):
        m = GPT2LMHeadModel(cfg)
    assert 123e6 < count_parameters(m) < 126e6


def test_load_saved_checkpoint_roundtrip(tmp_path):
    model, tok = load_model_and_tokenizer("cpu-micro", seed=0)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    m2, t2 = load_model_and_tokenizer(str(tmp_path))
    ids = torch.tensor([[4, 5, 13, 6, 14]])
    assert torch.equal(model(ids).logits, m2(ids).logits)
    assert t2.pad_token_id == tok.pad_token_id and t2.padding_side == "left"


def test_foreign_checkpoint_without_pad_token_gets_one(tmp_path):
    """Any HF causal LM directory works with its own tokenizer (here one with no pad token)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<|endoftext|>": 0, **{c: i + 1 for i, c in enumerate("0123456789+= ")}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split(r"", behavior="isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>")
    tok.save_pretrained(tmp_path)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_embd=16, n_layer=1, n_head=2, n_positions=32)).save_pretrained(tmp_path)
    model, t = load_model_and_tokenizer(str(tmp_path))
    assert t.pad_token_id == t.eos_token_id == 0 and t.padding_side == "left"
    from sapo_lab.tasks import make_problem, verify
    from sapo_lab.training.rollout import rollout

    batch = rollout(
        model,
        t,
        [make_problem(3, 4, 2)],
        reward_fn=verify,
        num_generations=3,
        max_completion_length=4,
        generator=torch.Generator().manual_seed(0),
    )
    assert batch.num_responses == 3 and all(ep.reason in ("correct", "wrong", "invalid", "truncated") for ep in batch.episodes)


def test_missing_model_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_model_and_tokenizer(str(tmp_path / "nope"))


def test_position_ids_ignore_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_response_logprobs_matches_manual_and_padding_invariant():
    torch.manual_seed(0)
    model = build_model("cpu-micro", vocab_size=15).eval()
    seq = [4, 5, 13, 6, 14, 7, 1]  # prompt of 5, response of 2
    ids = torch.tensor([seq, [0, 0] + seq[2:]])  # second row: a shorter prompt, left padded
    attn = torch.tensor([[1] * 7, [0, 0] + [1] * 5])
    resp = torch.tensor([[0] * 5 + [1, 1]] * 2)
    logp = response_logprobs(model, ids, attn, resp)
    assert logp.shape == (2, 2)
    full = torch.log_softmax(model(torch.tensor([seq])).logits[0], -1)
    manual = torch.stack([full[4, 7], full[5, 1]])
    torch.testing.assert_close(logp[0], manual, atol=1e-5, rtol=0)
    short = torch.log_softmax(model(torch.tensor([seq[2:]])).logits[0], -1)
    torch.testing.assert_close(logp[1], torch.stack([short[2, 7], short[3, 1]]), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="no token"):
        response_logprobs(model, ids, attn, torch.zeros_like(resp))
    with pytest.raises(ValueError, match="share a shape"):
        response_logprobs(model, ids, attn[:, :3], resp)
