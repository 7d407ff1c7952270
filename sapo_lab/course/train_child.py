"""The process in which the grader's training part runs: ``python -m sapo_lab.course.train_child`` (the request, JSON,
on stdin; the result written to the request's ``result_fd``, a pipe to the grading process).

sapo_lab's trainer runs here; the student's module never does. It is imported in a guarded student process of its
own (``sandbox.py`` in its serve mode: sapo_lab refused in any form unless the request allows it, no files of the
package, no processes), which this process asks for each ``sapo_loss`` call: it sends the call's tensors, gets back
the loss and its gradient with respect to ``logp``, and hands the trainer a loss with that value and that gradient
(``grader.StudentLoss``). So a module that trains by calling the library, whether at import or inside
``sapo_loss``, is refused as the other parts refuse it. This process trains for the request's step budget
(``grader.train_part``), writes progress to its output, which the grading process relays to stderr with a cap, and
writes the summary's numbers (JSON) to the result pipe; the grading process compares them with the threshold.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace


def main(argv) -> int:
    """Train with the student's sapo_loss as the request says and write the summary's numbers to the result pipe."""
    request = json.loads(sys.stdin.buffer.readline())
    result_pipe = os.fdopen(int(request["result_fd"]), "w")  # not inherited by the student's process (close_fds)
    from sapo_lab.course import grader
    from sapo_lab.course.grader import StudentLoss, StudentLossError

    def log(message):
        print(message, file=sys.stderr, flush=True)

    reward_fn = None
    if request.get("reward"):  # (file, function name): a task's reward other than the config's (the tests' micro runs)
        import importlib.util

        spec = importlib.util.spec_from_file_location("_grader_reward", request["reward"][0])
        rewards = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(rewards)
        reward_fn = getattr(rewards, request["reward"][1])
    path = request["module"]
    with tempfile.TemporaryDirectory(prefix="sapo-student-") as tmp:
        student = StudentLoss(path, Path(tmp), allow_sapo_lab=bool(request.get("allow_sapo_lab")),
                              call_limit=request.get("call_limit"), budget=request.get("budget"),
                              isolate=request.get("isolate", True))
        try:
            student.wait_imported()
            result, summary = grader.train_part(SimpleNamespace(sapo_loss=student), request["config"],
                                                request["overrides"], min_gain=float("-inf"), log=log,
                                                reward_fn=reward_fn)
            record = {"note": result.note}
            if summary is not None:
                record.update({k: summary.get(k) for k in ("cold_start_pass1", "final_pass1", "pass1_gain", "steps",
                                                           "train_wall_s")})
        except StudentLossError as exc:
            record = {"error": f"{path} {exc}".splitlines()[0]}
        finally:
            student.close()
        # the guard sends its refusal itself, so it counts even when the module hid the error from the trainer
        sent = next((e for e in student._events() if e.get("event") == "refused"), None)
        if sent is not None and not student.refused:
            student.refused = sent["message"]
        if student.refused:  # refused while training, though the trainer caught the error: no result counts
            record = {"error": grader.refusal_line(path, student.refused)}
    with result_pipe:
        json.dump(record, result_pipe)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
