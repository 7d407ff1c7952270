"""The process in which the grader's training part runs: ``python -m sapo_lab.course.train_child REQUEST RESULT``.

The student's module is imported here, never in the grading process, so nothing it does at import or while it
trains can reach the grading process's report or exit status. It trains with the module's ``sapo_loss`` for the
request's step budget (``grader.train_part``), writes progress to its output, which the grading process relays
to stderr with a cap, and writes the summary's numbers to RESULT (JSON); the grading process compares them with
the threshold.
"""

from __future__ import annotations

import json
import sys


def main(argv) -> int:
    """Train with the student's sapo_loss as the request says and write the summary's numbers to RESULT."""
    request_path, result_path = argv[1], argv[2]
    with open(request_path) as f:
        request = json.load(f)
    from sapo_lab.course import grader

    def log(message):
        print(message, file=sys.stderr, flush=True)

    reward_fn = None
    if request.get("reward"):  # (file, function name): a task's reward other than the config's (the tests' micro runs)
        import importlib.util

        spec = importlib.util.spec_from_file_location("_grader_reward", request["reward"][0])
        rewards = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(rewards)
        reward_fn = getattr(rewards, request["reward"][1])
    try:
        module = grader.load_module(request["module"])
    except grader.NotGradable as exc:
        record = {"error": str(exc)}
    else:
        result, summary = grader.train_part(module, request["config"], request["overrides"], min_gain=float("-inf"),
                                            log=log, reward_fn=reward_fn)
        record = {"note": result.note}
        if summary is not None:
            record.update({k: summary.get(k) for k in ("cold_start_pass1", "final_pass1", "pass1_gain", "steps",
                                                       "train_wall_s")})
    with open(result_path, "w") as f:
        json.dump(record, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
