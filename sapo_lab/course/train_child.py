"""The process in which the grader's training part runs: ``python -m sapo_lab.course.train_child REQUEST RESULT``.

sapo_lab's trainer runs here; the student's module never does. It is imported in a guarded student process of its
own (``sandbox.py`` in its serve mode: sapo_lab refused in any form unless the request allows it, no files of the
package, no processes), which this process asks for each ``sapo_loss`` call: it sends the call's tensors, gets back
the loss and its gradient with respect to ``logp``, and hands the trainer a loss with that value and that gradient
(:class:`StudentLoss`). So a module that trains by calling the library, whether at import or inside
``sapo_loss``, is refused as the other parts refuse it. This process trains for the request's step budget
(``grader.train_part``), writes progress to its output, which the grading process relays to stderr with a cap, and
writes the summary's numbers to RESULT (JSON); the grading process compares them with the threshold.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


class StudentLossError(RuntimeError):
    """The student's sapo_loss failed, hung, or its process ended; one line."""


class StudentRefused(StudentLossError):
    """The student's process did something the guard refuses (import sapo_lab, read its files, start a process)."""


class StudentLoss:
    """The student's ``sapo_loss``, called in the guarded student process and answered with a value and a gradient.

    ``self(logp, behavior_logp, advantages, mask, tau_pos=, tau_neg=)`` returns ``value + <grad, logp - logp.detach()>``:
    the student's loss value, whose gradient with respect to ``logp`` is the student's gradient."""

    def __init__(self, module_path: str, workdir: Path, allow_sapo_lab: bool = False, call_limit: float | None = None):
        from . import grader

        self.path = module_path
        self.call_limit = grader.TIME_LIMIT_S if call_limit is None else call_limit
        self.result = workdir / "result.jsonl"
        request_read, self._request_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        blocked_dirs, blocked_files = grader._blocked_paths(allow_sapo_lab)
        request = {"module": str(Path(module_path).resolve()), "parts": list(grader.PARTS), "calls": [],
                   "substitute_names": [], "substitutes": "", "allow_sapo_lab": allow_sapo_lab,
                   "blocked_dirs": blocked_dirs, "blocked_files": blocked_files,
                   "extra_sys_path": [str(grader.ROOT)] if allow_sapo_lab else [],
                   "serve": [request_read, reply_write]}
        (workdir / "request.json").write_text(json.dumps(request))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-I", str(grader.SANDBOX), str(workdir / "request.json"),
                                      str(self.result)], cwd=workdir, env=env, pass_fds=(request_read, reply_write),
                                     stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        os.close(request_read)
        os.close(reply_write)
        self._buffer = bytearray()
        self.refused: str | None = None

    # ---- the student's process --------------------------------------------------------------------------
    def _events(self) -> list:
        from .grader import _read_events

        return _read_events(self.result)

    def _ended(self) -> StudentLossError:
        """The error to raise once the student's process has stopped answering."""
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.close()
        events = self._events()
        refused = next((e for e in events if e.get("event") == "refused"), None)
        if refused is not None:
            self.refused = refused.get("message", "imports sapo_lab")
            return StudentRefused(self.refused)
        failed = next((e for e in events if e.get("event") == "import_failed"), None)
        if failed is not None:
            return StudentLossError(f"does not import: {failed.get('message', '')}")
        return StudentLossError(f"the student's process ended (exit status {self.proc.returncode})")

    def wait_imported(self) -> None:
        """Return once the module has imported; StudentLossError (StudentRefused) when it does not."""
        from .grader import STARTUP_LIMIT_S

        deadline = time.monotonic() + STARTUP_LIMIT_S + self.call_limit
        while time.monotonic() < deadline:
            if any(e.get("event") == "imported" for e in self._events()):
                return
            if self.proc.poll() is not None:
                raise self._ended()
            time.sleep(0.05)
        self.close()
        raise StudentLossError(f"did not finish importing within the time limit ({self.call_limit:g} s)")

    def _read(self, n: int | None = None) -> bytes:
        """One line (``n`` None) or ``n`` bytes of the reply; StudentLossError past the call's time limit."""
        deadline = time.monotonic() + self.call_limit
        while True:
            end = self._buffer.find(b"\n") + 1 if n is None else (n if len(self._buffer) >= n else 0)
            if end:
                data = bytes(self._buffer[:end])
                del self._buffer[:end]
                return data
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise StudentLossError(f"sapo_loss did not return within the time limit ({self.call_limit:g} s)")
            ready, _, _ = select.select([self._reply_read], [], [], left)
            if ready:
                chunk = os.read(self._reply_read, 1 << 20)
                if not chunk:
                    raise self._ended()
                self._buffer += chunk

    def __call__(self, logp, behavior_logp, advantages, mask, *, tau_pos, tau_neg):
        import torch

        wire = logp.dtype if logp.dtype in (torch.float32, torch.float64) else torch.float32
        sent = [t.detach().to("cpu", wire).contiguous() for t in (logp, behavior_logp, advantages, mask)]
        head = {"dtype": str(wire).removeprefix("torch."), "shapes": [list(t.shape) for t in sent],
                "tau_pos": float(tau_pos), "tau_neg": float(tau_neg)}
        try:
            os.write(self._request_write, json.dumps(head).encode() + b"\n")
            for t in sent:
                data = memoryview(t.numpy().tobytes())
                while data:
                    data = data[os.write(self._request_write, data):]
        except BrokenPipeError:
            raise self._ended() from None
        try:
            reply = json.loads(self._read())
        except ValueError:
            raise StudentLossError("the student's process answered something that is not a reply") from None
        if "refused" in reply:
            self.refused = str(reply["refused"])
            raise StudentRefused(self.refused)
        if reply.get("not_implemented"):
            raise NotImplementedError("sapo_loss")
        if "error" in reply or not isinstance(reply.get("loss"), (int, float)):
            raise StudentLossError(str(reply.get("error", "no loss in the reply"))[:200])
        grad = torch.frombuffer(bytearray(self._read(sent[0].numel() * sent[0].element_size())), dtype=wire)
        grad = grad.reshape(logp.shape).to(logp.device, logp.dtype)
        value = torch.tensor(reply["loss"], dtype=logp.dtype, device=logp.device)
        return value + (grad * (logp - logp.detach())).sum()

    def close(self) -> None:
        """End the student's process (and anything it started)."""
        for fd in (self._request_write, self._reply_read):
            try:
                os.close(fd)
            except OSError:
                pass
        self._request_write = self._reply_read = -1
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, 9)
                except ProcessLookupError:
                    pass
                self.proc.wait()


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
    path = request["module"]
    with tempfile.TemporaryDirectory(prefix="sapo-student-") as tmp:
        student = StudentLoss(path, Path(tmp), allow_sapo_lab=bool(request.get("allow_sapo_lab")))
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
        if student.refused:  # refused while training, though the trainer caught the error: no result counts
            record = {"error": grader.refusal_line(path, student.refused)}
    with open(result_path, "w") as f:
        json.dump(record, f)
    return 0


if __name__ == "__main__":
    from sapo_lab.course import train_child  # its StudentLossError is the class grader.train_part catches

    sys.exit(train_child.main(sys.argv))
