"""Do TRL's SAPO settings reach the loss? Train TRL's own GRPOTrainer for two steps with a spy on its loss.

Runs in TRL's environment (``benchmarks/.venv-trl``, ``tools/ci_trl.sh --build-only``):

    benchmarks/.venv-trl/bin/python -m framework_audit.settings_reach_trl

A tiny GPT-2 and its character tokenizer are created and saved by the run itself (no hub download) and
passed to ``trl.GRPOTrainer`` by path, as a user passes a model. The spy wraps the trainer's
``_compute_loss`` (where TRL 1.16 computes the SAPO gate) and, while that method runs, records the
temperature tensor that ``torch.where`` selects from the two configured floats and the argument
``tau * (r - 1)`` that the gate passes to ``torch.sigmoid``. From those two the run reports the
temperatures the loss saw and the share of completion tokens with ``r != 1``.

Two settings: ``configured`` (tau_pos, tau_neg not the defaults, and ``steps_per_generation = 2``:
the second optimizer step reuses the rollout, so ratios move) and ``paper``, TRL's documented configuration
for reproducing the SAPO paper (``docs/source/paper_index.md``), whose other settings are TRL's defaults:
one optimizer step per rollout, so every ratio is 1 and the SAPO gate's gradient weight is that of GRPO.
The results are written to the ``trl`` section of ``results/conformance/settings_reach.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# |r - 1| above this counts as a moved ratio: float32 log-probs of two forward passes over different batch
# shapes can differ by a few ulps, which is not an update.
R_TOLERANCE = 1e-6

CONFIGURED_TAU = {"sapo_temperature_pos": 1.3, "sapo_temperature_neg": 1.7}

# What the tiny CPU run needs and the documented setting does not fix; none of it changes how many
# optimizer steps use one rollout.
SMALL_RUN = {
    "num_generations": 4,
    "per_device_train_batch_size": 4,
    "max_completion_length": 5,
    "max_steps": 2,
    "learning_rate": 1e-2,
    "seed": 0,
}

SETTINGS = {
    "configured": {
        "loss_type": "sapo",
        **CONFIGURED_TAU,
        "steps_per_generation": 2,
        "gradient_accumulation_steps": 1,
    },
    # docs/source/paper_index.md, "Soft Adaptive Policy Optimization": the rest are GRPOConfig's defaults.
    "paper": {
        "loss_type": "sapo",
        "sapo_temperature_pos": 1.0,
        "sapo_temperature_neg": 1.05,
        "scale_rewards": "group",
    },
}

PAPER_SETTING_SOURCE = {
    "repository": "huggingface/trl",
    "path": "docs/source/paper_index.md",
    "section": "Soft Adaptive Policy Optimization",
    "commit": "0167b7dfd373ff29d11bdbddbd93701b58c5a42c",
}

PROMPTS = [f"{a}+{b}=" for a in range(10, 14) for b in range(20, 24)]


def parity_reward(prompts, completions, **kwargs) -> list[float]:
    """A reward that varies inside each group even for an untrained model, so the advantages are not zero."""
    return [float(len(c if isinstance(c, str) else str(c)) % 2) for c in completions]


class LossSpy:
    """Wraps a trainer's ``_compute_loss``; records, per call, the SAPO temperatures and the gate's argument.

    While the wrapped method runs, ``torch.where`` and ``torch.sigmoid`` are replaced by recorders that call
    the originals. The temperature tensor is the last ``torch.where(cond, float, float)`` before the gate's
    sigmoid; the gate's argument is the tensor that sigmoid receives.
    """

    def __init__(self, trainer):
        self.calls: list[dict] = []
        self._original = trainer._compute_loss
        trainer._compute_loss = self._spied

    def _spied(self, model, inputs):
        call = {"tau": None, "positive": None, "gate_arg": None}
        real_where, real_sigmoid = torch.where, torch.sigmoid

        def where(condition, *args, **kwargs):
            out = real_where(condition, *args, **kwargs)
            if len(args) == 2 and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args):
                call["tau"], call["positive"] = out.detach().clone(), condition.detach().clone()
            return out

        def sigmoid(x, *args, **kwargs):
            if call["tau"] is not None and call["gate_arg"] is None:
                call["gate_arg"] = x.detach().clone()
            return real_sigmoid(x, *args, **kwargs)

        torch.where, torch.sigmoid = where, sigmoid
        try:
            loss = self._original(model, inputs)
        finally:
            torch.where, torch.sigmoid = real_where, real_sigmoid
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        call["mask"] = mask.detach().clone().bool()
        self.calls.append(call)
        return loss


def summarise_call(call: dict) -> dict:
    """One loss call: the temperatures seen on positive / non-positive advantages, and the moved ratios."""
    from sapo_lab.objective.gates import gate_weight

    if call["tau"] is None or call["gate_arg"] is None:
        return {"gate_seen": False}
    mask = call["mask"]
    tau = call["tau"].expand_as(call["gate_arg"]).double()
    positive = call["positive"].expand_as(call["gate_arg"])
    r_minus_1 = call["gate_arg"].double() / tau  # the gate's argument is tau * (r - 1)
    tokens = mask if r_minus_1.shape == mask.shape else mask.any(dim=-1, keepdim=True)  # sequence level: (B, 1)
    moved = (r_minus_1.abs() > R_TOLERANCE) & tokens
    # the paper's gradient weight of the gate at the ratios the loss saw (1 at r = 1, as GRPO's)
    weight = gate_weight(1.0 + r_minus_1, tau)[tokens]
    return {
        "gate_seen": True,
        "tau_dtype": str(call["tau"].dtype).removeprefix("torch."),
        "tau_pos_seen": sorted({round(v, 12) for v in tau[positive & tokens].tolist()}),
        "tau_neg_seen": sorted({round(v, 12) for v in tau[~positive & tokens].tolist()}),
        "tokens": int(tokens.sum()),
        "share_r_ne_1": float(moved.sum()) / max(int(tokens.sum()), 1),
        "max_abs_r_minus_1": float(r_minus_1[tokens].abs().max()) if tokens.any() else 0.0,
        "gate_weight_range": [float(weight.min()), float(weight.max())] if tokens.any() else [],
    }


def save_tiny_model(directory: str) -> str:
    """A freshly initialised micro GPT-2 and its character tokenizer, saved where a user keeps a model."""
    from sapo_lab.training.model import build_model
    from sapo_lab.training.tokenizer import build_char_tokenizer

    build_model("cpu-micro", seed=0).save_pretrained(directory)
    build_char_tokenizer().save_pretrained(directory)
    return directory


def run_setting(name: str, model_dir: str, work_dir: str, after_build=None, trainer_class=None,
                config_class=None) -> dict:
    """Train TRL's GRPOTrainer for two optimizer steps in setting ``name``; return what the loss saw.

    ``after_build(trainer)`` runs between building the trainer and training (the tests use it to plant a
    setting that does not reach the loss). ``trainer_class`` / ``config_class``: a subclass of TRL's trainer
    and config (another framework's GRPO trainer built on TRL's) instead of TRL's own.
    """
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer

    settings = {**SMALL_RUN, **SETTINGS[name]}
    args = (config_class or trl.GRPOConfig)(
        output_dir=os.path.join(work_dir, name), use_cpu=True, bf16=False, fp16=False, report_to=[],
        save_strategy="no", logging_steps=1, disable_tqdm=True, **settings,
    )
    trainer = (trainer_class or trl.GRPOTrainer)(
        model=model_dir,
        reward_funcs=parity_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    if after_build is not None:
        after_build(trainer)
    spy = LossSpy(trainer)
    trainer.train()
    steps = [{"step": i + 1, **summarise_call(c)} for i, c in enumerate(spy.calls)]
    seen = [s for s in steps if s["gate_seen"]]
    tokens = sum(s["tokens"] for s in seen)
    weights = [w for s in seen for w in s["gate_weight_range"]]
    generate_every = trainer.args.steps_per_generation * trainer.args.num_iterations
    return {
        "grpo_config": settings,
        "steps_per_generation": trainer.args.steps_per_generation,
        "gradient_accumulation_steps": trainer.args.gradient_accumulation_steps,
        "num_iterations": trainer.args.num_iterations,
        # TRL computes old log-probs only when an optimizer step can see a rollout from an older policy
        "one_update_per_rollout": trainer.args.gradient_accumulation_steps % generate_every == 0,
        "loss_calls": len(steps),
        "steps": steps,
        "tau_pos_seen": sorted({v for s in seen for v in s["tau_pos_seen"]}),
        "tau_neg_seen": sorted({v for s in seen for v in s["tau_neg_seen"]}),
        "tokens": tokens,
        "share_r_ne_1": sum(s["share_r_ne_1"] * s["tokens"] for s in seen) / max(tokens, 1),
        "tau_dtype": seen[0]["tau_dtype"] if seen else None,
        "gate_weight_range": [min(weights), max(weights)] if weights else [],
    }


def reach_problems(result: dict, tau_pos: float, tau_neg: float) -> list[str]:
    """Why the configured temperatures did not reach the loss (empty when they did).

    The loss holds the temperatures in its tensors' dtype, so a configured 1.3 arrives as float32's 1.3.
    """
    problems = []
    dtype = getattr(torch, result["tau_dtype"] or "float64")
    if not result["steps"] or not all(s["gate_seen"] for s in result["steps"]):
        problems.append("the SAPO gate was not computed at every loss call")
    for label, seen, want in (("tau_pos", result["tau_pos_seen"], tau_pos), ("tau_neg", result["tau_neg_seen"], tau_neg)):
        if any(abs(v - torch.tensor(want, dtype=dtype).item()) > 1e-9 for v in seen):
            problems.append(f"{label}: the loss saw {seen}, configured {want}")
    if not result["tau_pos_seen"] and not result["tau_neg_seen"]:
        problems.append("no completion token reached the gate")
    return problems


def measure(work_dir: str, trainer_class=None, config_class=None) -> dict:
    """Both settings on one saved tiny model; the ``trl`` section of settings_reach.json.

    With ``trainer_class`` / ``config_class`` (subclasses of TRL's), the same runs on another framework's
    GRPO trainer; the section then names that class.
    """
    import transformers
    import trl

    trainer = trainer_class or trl.GRPOTrainer
    name = f"{trainer.__module__}.{trainer.__qualname__}"
    model_dir = save_tiny_model(os.path.join(work_dir, "model"))
    section = {
        "level": f"training: {name}.train(), the loss as its trainer calls it",
        "trainer": name,
        "trl": trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "spy": f"{trainer.__qualname__}._compute_loss wrapped; torch.where (temperature selection) and "
               "torch.sigmoid (gate argument tau*(r-1)) recorded while it runs",
        "r_tolerance": R_TOLERANCE,
        "paper_setting_source": PAPER_SETTING_SOURCE,
        "settings": {},
    }
    for setting in SETTINGS:
        result = run_setting(setting, model_dir, work_dir, trainer_class=trainer_class, config_class=config_class)
        configured = SETTINGS[setting]
        result["problems"] = reach_problems(result, configured["sapo_temperature_pos"], configured["sapo_temperature_neg"])
        result["tau_reached"] = not result["problems"]
        section["settings"][setting] = result
    return section


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "conformance", "settings_reach.json"),
                        help="the JSON file whose 'trl' section is (re)written")
    args = parser.parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        print("error: TRL is not installed here; run this with benchmarks/.venv-trl/bin/python", file=sys.stderr)
        return 2
    from framework_audit.settings_reach import write_section

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory() as work_dir:
        section = measure(work_dir)
    write_section(args.out, "trl", section)
    for name, s in section["settings"].items():
        print(f"{name}: tau_pos seen {s['tau_pos_seen']}, tau_neg seen {s['tau_neg_seen']}, "
              f"share r != 1 {s['share_r_ne_1']:.3f}, one update per rollout {s['one_update_per_rollout']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
