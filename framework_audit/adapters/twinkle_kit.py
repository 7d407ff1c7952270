"""twinkle-kit 0.5.1 (ModelScope's Twinkle): twinkle.loss.SAPOLoss, called as its models call a loss.

``TransformersModel.calculate_loss`` calls the loss instance as ``loss(inputs, outputs, **kwargs)``, with the
labels in ``inputs`` (``ignore_index`` -100 marks what is not trained) and the log-probs in ``outputs['logps']``;
``old_logps`` and ``advantages`` are the keyword arguments the user's training loop passes. The adapter builds the
instance as ``set_loss`` does (``construct_class``, keyword arguments to the constructor) and calls it that way with
the audit's tensors: the findings are at the function level (the loop around it is the user's).
``SAPOLoss.__init__`` takes ``tau_pos`` and ``tau_neg`` (default 1.0: the paper's tau_neg is 1.05) and passes any
other keyword, ``tau`` and ``clip_range`` included, to ``GRPOLoss.__init__``, whose ``**kwargs`` drops it
(``framework_audit/settings_reach_twinkle.py`` measures which temperatures reach the gate).
"""

from framework_audit.adapters import TAU_NEG, TAU_POS, Setting, Source

FUNCTION = "twinkle.loss.grpo.SAPOLoss.__call__"

SETTINGS = (
    Setting("defaults", {}, "SAPOLoss defaults: tau_pos=1.0, tau_neg=1.0"),
    Setting("paper", {"tau_pos": TAU_POS, "tau_neg": TAU_NEG}, "tau_neg=1.05 passed explicitly"),
    Setting("tau", {"tau": TAU_NEG, "clip_range": 0.2},
            "a single tau and clip_range: accepted without error and dropped (the defaults' tau_neg=1.0 trains)"),
)

SOURCES = (
    Source("twinkle/loss/grpo.py", 361, 393,
           "765e6034d82feaba529d2f53fb7eabf515e6733503a8d1cde29549f15d694d57",
           "SAPOLoss: tau_pos, tau_neg default 1.0, other keywords to GRPOLoss; gate (4/tau) sigmoid(tau (r - 1))"),
    Source("twinkle/loss/grpo.py", 28, 69,
           "765e6034d82feaba529d2f53fb7eabf515e6733503a8d1cde29549f15d694d57",
           "GRPOLoss.__init__ (**kwargs dropped); log r clamped to [-20, 20]"),
    Source("twinkle/loss/grpo.py", 95, 118,
           "765e6034d82feaba529d2f53fb7eabf515e6733503a8d1cde29549f15d694d57",
           "_aggregate_loss: each sequence's token mean, then the mean over every sequence (empty ones count)"),
    Source("twinkle/loss/grpo.py", 196, 304,
           "765e6034d82feaba529d2f53fb7eabf515e6733503a8d1cde29549f15d694d57",
           "__call__: mask = labels != ignore_index, advantages broadcast over the mask"),
)

# Read from those lines: the paper's gate and 4/tau and its per-response mean (an empty response counted in the
# mean is a scale, not a difference; the clamp at +-20 is harmless), but tau_neg is 1.0 unless passed: with
# the defaults, or with a single `tau`, the A < 0 temperature (and so the gradient's shape and values) differ.
_TAU_NEG = ["per-token gradient (autograd)", "gradient shape r*w_tau(r)", "temperature for A < 0"]
EXPECTED = {"defaults": _TAU_NEG, "paper": [], "tau": _TAU_NEG}
EXPECTED_FLOAT32 = dict(EXPECTED)


def load():
    import twinkle.loss
    from twinkle.loss.base import Loss
    from twinkle.utils.loader import construct_class

    return construct_class, Loss, twinkle.loss


def make_loss(function, options):
    construct_class, base, module = function
    instance = construct_class("SAPOLoss", base, module, **options)  # as the models' set_loss builds it

    def loss(logp, old_logp, advantages, mask):
        labels = mask.long().masked_fill(~mask, instance.ignore_index)
        return instance({"labels": labels}, {"logps": logp}, old_logps=old_logp, advantages=advantages)["loss"]

    return loss
