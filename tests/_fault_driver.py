"""``python tests/_fault_driver.py ARGS...``: the CLI, with the parity reward of the fault tests.

``SAPO_FAULT_KILL_AT=NAME@STEP`` SIGKILLs the process while checkpoint STEP is being
written, right before its file NAME (e.g. ``rng.safetensors@4``), to test a kill in the
middle of a checkpoint write.
"""

import os
import signal
import sys

from _micro import parity_reward

import sapo_lab.runs.checkpoint as checkpoint_mod
from sapo_lab.tasks import AdditionTask


def use_parity_reward(setattr_=setattr):
    """Make the micro runs' task (addition) reward by parity: the CLI takes its reward from the task."""
    setattr_(AdditionTask, "verify", lambda self, text, finished, problem: parity_reward(text, finished, problem))


def install_kill_switch():
    """``SAPO_FAULT_KILL_AT=NAME@STEP``: SIGKILL right before checkpoint STEP writes its file NAME."""
    kill_at = os.environ.get("SAPO_FAULT_KILL_AT")
    if not kill_at:
        return
    name, step = kill_at.split("@")
    real_save_file = checkpoint_mod.save_file

    def save_file_then_die(tensors, path, *args, **kwargs):
        if os.path.basename(path) == name and f"step-{int(step):06d}-" in path:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_save_file(tensors, path, *args, **kwargs)

    checkpoint_mod.save_file = save_file_then_die


if __name__ == "__main__":
    # Only as a script: importing this module (test_faults does) must not patch the task for other tests.
    from sapo_lab.cli import main

    use_parity_reward()
    install_kill_switch()
    sys.exit(main(sys.argv[1:]))
