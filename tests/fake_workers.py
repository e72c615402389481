"""Stand-in GPU workers for the evaluator's parent side on the CPU: `AnswerWorker` answers every evaluation with one
status, as the real worker (or the pool's watchdog, for TIMEOUT) would; `evaluator(status)` is a LocalEvaluator over
them. For test_watchdog.py and test_regpool.py."""
from __future__ import annotations

import time

from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.gpu.pool import GpuPool, PoolConfig


class AnswerWorker:
    """Answers every evaluation with `status` after `delay_s`; `spans` holds each job's (start, end) in monotonic time."""

    def __init__(self, device: int, status: str, delay_s: float = 0.0):
        self.device = device
        self.status, self.delay_s, self.jobs, self.hello, self.spans = status, delay_s, [], None, []
        self.replies = [{"type": "hello", "device_count": 1, "fingerprint": {"gpu": "NVIDIA H200", "sm_count": 132},
                         "limits": {"sm_count": 132, "name": "NVIDIA H200"}}]

    def send(self, msg):
        if msg.get("type") != "evaluate":
            return
        self.jobs.append(msg)
        start = time.monotonic()
        time.sleep(self.delay_s)
        self.spans.append((start, time.monotonic()))
        message = "the kernel did not finish within 5 s (run phase: the first call)" if self.status == "TIMEOUT" else ""
        self.replies.append({"type": "result", "id": msg["id"], "replace": False,
                             "result": {"status": self.status, "message": message}})

    def recv(self, timeout):
        return self.replies.pop(0) if self.replies else None

    def alive(self):
        return True

    exitcode = None

    def kill(self):
        """Nothing to release."""

    def stop(self, grace_s=0.0):
        """Nothing to release."""


def evaluator(status: str, delay_s: float = 0.0, devices=(0,)) -> tuple[LocalEvaluator, list]:
    workers: list[AnswerWorker] = []

    def make(d, c):
        workers.append(AnswerWorker(d, status, delay_s))
        return workers[-1]

    return LocalEvaluator(GpuPool(PoolConfig(devices=list(devices), spares=0), factory=make)), workers
