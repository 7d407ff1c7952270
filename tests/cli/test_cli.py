import json
import os
import subprocess
import sys

import pytest
from _micro import micro_args

from sapo_lab.cli import main, parse_overrides


@pytest.mark.parametrize(
    "argv,match",
    [
        (["train", "--config", "no-such-preset"], "unknown preset"),
        (["train", "--no_such_key", "1"], "unknown config key"),
        (["train", "--loss_type", "ppo"], "loss.loss_type"),
        (["train", "--max_steps"], "needs a value"),
        (["train", "stray"], "unexpected argument"),
        (["fly"], "invalid choice"),
        ([], "required"),
        (["compare", "--seeds", "a,b"], "--seeds"),
        (["eval", "--model", "/no/such/dir"], "does not exist"),
    ],
)
def test_user_errors_are_one_line_exit_2(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and match in err and "\n" not in err and "Traceback" not in err


def test_resume_without_run_is_an_error(capsys, tmp_path):
    assert main(["train", "--resume", "--output-dir", str(tmp_path / "x")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_parse_overrides():
    assert parse_overrides(["--a", "1", "--b=2"]) == {"a": "1", "b": "2"}


def test_train_eval_sample_compare(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert main(["train", "--output-dir", run, *micro_args()]) == 0
    out = capsys.readouterr().out
    assert "cold-start Pass@1" in out and "final Pass@1" in out
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert summary["seed"] == 0 and summary["loss_type"] == "sapo"
    model = os.path.join(run, "final_model")
    assert main(["eval", "--model", model, *micro_args()]) == 0
    assert "Pass@1" in capsys.readouterr().out
    assert main(["sample", "--model", model, "--num", "3", *micro_args()]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 3
    cmp_dir = str(tmp_path / "cmp")
    args = micro_args(**{"optimization.max_steps": 2})
    assert main(["compare", "--loss-types", "sapo,grpo", "--seeds", "0", "--output-dir", cmp_dir, *args]) == 0
    rows = json.load(open(os.path.join(cmp_dir, "results.json")))
    assert [r["loss_type"] for r in rows] == ["sapo", "grpo"]


def test_module_entry_point_reports_errors_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sapo_lab", "train", "--seed", "x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: config key 'seed' must be an integer, got 'x'"]


def test_train_from_a_saved_hugging_face_directory(tmp_path, capsys):
    """``--model DIR`` trains any saved causal LM with its own tokenizer (here: no pad token, BPE-free)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {"<|endoftext|>": 0, **{c: i + 1 for i, c in enumerate("0123456789+=")}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    model_dir = tmp_path / "hf"
    PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>").save_pretrained(model_dir)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_embd=16, n_layer=1, n_head=2, n_positions=32)).save_pretrained(model_dir)
    run = tmp_path / "run"
    args = micro_args(**{"optimization.max_steps": 2})
    assert main(["train", "--model", str(model_dir), "--output-dir", str(run), *args]) == 0
    summary = json.load(open(run / "summary.json"))
    assert summary["config"]["model"]["name_or_path"] == str(model_dir)
    assert os.path.isfile(run / "final_model" / "tokenizer.json")
