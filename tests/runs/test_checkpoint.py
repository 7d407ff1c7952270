import json
import os

import pytest
import torch

from sapo_lab.runs.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from sapo_lab.training.model import build_model


def _model_and_opt(seed):
    torch.manual_seed(seed)
    m = build_model("cpu-micro", vocab_size=15)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    ids = torch.randint(0, 15, (2, 6))
    m(ids, labels=ids).loss.backward()
    opt.step()
    return m, opt


def test_roundtrip_restores_everything(tmp_path):
    m, opt = _model_and_opt(0)
    gens = {"a": torch.Generator().manual_seed(1)}
    torch.rand(3, generator=gens["a"])
    save_checkpoint(str(tmp_path), 7, m, opt, gens, {"elapsed_s": 1.5, "counters": {"x": 1}})
    expect_next = torch.rand(3, generator=gens["a"])
    m2, opt2 = _model_and_opt(1)
    g2 = {"a": torch.Generator().manual_seed(99)}
    state = load_checkpoint(latest_checkpoint(str(tmp_path)), m2, opt2, g2)
    assert state["step"] == 7 and state["counters"] == {"x": 1}
    for (k, v), (_, w) in zip(m.state_dict().items(), m2.state_dict().items(), strict=True):
        assert torch.equal(v, w), k
    assert m2.lm_head.weight.data_ptr() == m2.transformer.wte.weight.data_ptr()  # tying survives
    s1, s2 = opt.state_dict(), opt2.state_dict()
    for pid in s1["state"]:
        for key in s1["state"][pid]:
            assert torch.equal(torch.as_tensor(s1["state"][pid][key]), torch.as_tensor(s2["state"][pid][key]))
    assert torch.equal(torch.rand(3, generator=g2["a"]), expect_next)


def test_atomic_layout_and_pruning(tmp_path):
    m, opt = _model_and_opt(0)
    for step in (2, 4, 6):
        save_checkpoint(str(tmp_path), step, m, opt, {}, {})
    root = tmp_path / "checkpoints"
    assert sorted(os.listdir(root)) == ["latest.json", "step-000004", "step-000006"]  # no temp dirs left
    assert json.loads((root / "latest.json").read_text())["step"] == 6
    assert latest_checkpoint(str(tmp_path)).endswith("step-000006")
    assert latest_checkpoint(str(tmp_path / "none")) is None


def test_incomplete_checkpoint_is_refused(tmp_path):
    m, opt = _model_and_opt(0)
    ckpt = save_checkpoint(str(tmp_path), 1, m, opt, {}, {})
    os.remove(os.path.join(ckpt, "optimizer.safetensors"))
    with pytest.raises(ValueError, match="incomplete"):
        load_checkpoint(ckpt, m, opt, {})


def test_checkpoint_files_are_not_pickles(tmp_path):
    m, opt = _model_and_opt(0)
    ckpt = save_checkpoint(str(tmp_path), 1, m, opt, {"g": torch.Generator()}, {})
    for name in os.listdir(ckpt):
        with open(os.path.join(ckpt, name), "rb") as f:
            head = f.read(2)
        assert head != b"\x80\x04" and not name.endswith((".pt", ".bin", ".pkl"))
