"""nano_sapo's training step hands every setting to the loss it calls, with values that differ from the defaults
and from each other (a setting that stops reaching the loss, or two swapped, shows)."""

import torch

from sapo_lab.course import nano_sapo
from sapo_lab.tasks.addition import make_splits
from sapo_lab.training.model import build_model


def test_rl_step_gives_the_loss_both_temperatures_as_set():
    # catches: tau_pos passed where tau_neg belongs (or the two swapped, or a default used): the negative
    # temperature never reaches the loss; 0.7 and 1.9 are neither defaults (1.0, 1.05) nor equal
    settings = nano_sapo.Settings(prompts=2, group=2, minibatches=2, tau_pos=0.7, tau_neg=1.9, warmup=1)
    splits = make_splits(seed=0, min_digits=1, max_digits=2, num_train=8, num_dev=2, num_eval=2)
    max_len = len(splits["train"][0].answer) + 1
    torch.manual_seed(0)
    model = build_model("cpu-tiny", seed=0).float()
    opt = torch.optim.AdamW(model.parameters(), lr=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0)
    seen = []

    def recording_loss(logp, old_logp, advantages, mask, **settings_given):
        seen.append(settings_given)
        return (logp * mask).sum() * 0.0  # differentiable, changes nothing

    nano_sapo.rl_step(model, opt, schedule, splits["train"][:2], settings, recording_loss, max_len)
    assert seen == [{"tau_pos": 0.7, "tau_neg": 1.9}] * 2  # one call per minibatch, M = 2
