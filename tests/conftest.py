"""Fixtures shared by the tests. Plain helpers live in modules imported as ``from _micro import ...``
(this file's folder is on ``sys.path`` because pytest loads it as the root conftest of ``tests/``).

* ``float64_by_default``: opt-in (``pytestmark = pytest.mark.usefixtures("float64_by_default")``) for
  tests that compare against closed forms at float64 precision;
* ``spy``: record every call of a sapo_lab function, wherever sapo_lab code looks it up from;
* ``optimizer_steps``: what each ``optimizer.step()`` of the test sees (learning rate, AdamW settings,
  the gradient norm after clipping), through torch's global optimizer hook.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook


@pytest.fixture(autouse=True)
def default_dtype_is_left_as_found():
    """Fails the test that leaves torch's default dtype changed: a float64 default left behind makes every
    later test in the same worker build float64 models, and the failures then show up far from the cause."""
    before = torch.get_default_dtype()
    yield
    after = torch.get_default_dtype()
    torch.set_default_dtype(before)
    assert after == before, f"the test left torch's default dtype at {after} (it was {before})"


@pytest.fixture
def float64_by_default():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@dataclass
class Call:
    args: tuple
    kwargs: dict
    result: object = None


def _bindings(func):
    """Every (module, name) of the loaded sapo_lab modules that holds ``func``: a spy there sees every caller."""
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "sapo_lab" or name.startswith("sapo_lab.")):
            for attr, value in list(vars(module).items()):
                if value is func:
                    yield module, attr


@pytest.fixture
def spy(monkeypatch):
    """``calls = spy(func, on_call=None)``: wrap ``func`` in every sapo_lab module that binds it.

    Each call appends a :class:`Call` (its result included) to ``calls``; ``on_call(call)``, if
    given, runs right after the real function, before its caller continues. Import the modules
    under test before spying: a module loaded later would bind the real function.
    """

    def install(func, on_call=None):
        calls = []

        def wrapper(*args, **kwargs):
            call = Call(args, kwargs, func(*args, **kwargs))
            calls.append(call)
            if on_call is not None:
                on_call(call)
            return call.result

        sites = list(_bindings(func))
        assert sites, f"no loaded sapo_lab module binds {func.__module__}.{func.__name__}"
        for module, attr in sites:
            monkeypatch.setattr(module, attr, wrapper)
        return calls

    return install


@dataclass
class OptimizerStep:
    optimizer: torch.optim.Optimizer
    groups: list[dict]  # each param group's settings (lr, betas, eps, weight_decay, ...), without its params
    grad_norm: float  # the L2 norm of every gradient the step is about to apply (after any clipping)
    state_steps: int  # how many steps the optimizer's state had counted before this one
    num_params: int  # elements of the parameters the optimizer updates


def _snapshot(optimizer) -> OptimizerStep:
    params = [p for g in optimizer.param_groups for p in g["params"]]
    grads = [p.grad.detach().double() for p in params if p.grad is not None]
    norm = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))) if grads else 0.0
    counted = [int(optimizer.state[p]["step"]) for p in params if "step" in optimizer.state.get(p, {})]
    return OptimizerStep(
        optimizer=optimizer,
        groups=[{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
        grad_norm=norm,
        state_steps=max(counted, default=0),
        num_params=sum(p.numel() for p in params),
    )


@pytest.fixture
def optimizer_steps():
    """The list of :class:`OptimizerStep`, one per ``step()`` of any torch optimizer during the test."""
    steps: list[OptimizerStep] = []
    handle = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: steps.append(_snapshot(optimizer)))
    yield steps
    handle.remove()


def pytest_configure(config):
    # pytest-xdist registers this mark; a serial run without xdist (-p no:xdist) must know it too
    config.addinivalue_line("markers", "xdist_group(name): tests that share one pytest-xdist worker")
