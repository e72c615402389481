"""TIMEOUT verdicts remembered for an evaluator's lifetime, so an identical binary that hung is not run again.

A model that resubmits a hanging kernel unchanged (the repair track's do-nothing model does it every turn; so
do real models) would cost the watchdog's whole limit plus a worker replacement each time. The key is what
decides whether the kernel hangs: the cubin's bytes, the resolved launch plan, the workload and every option of
the job (trials, distribution, seed, timing, the timeout); only TIMEOUT is remembered (a fault, a wrong answer
or a pass is always evaluated again). An identical job already running is waited for, so two trajectories
submitting the same kernel at once (turn 0 of a repair task under two models) run it once.
Pure logic (no torch, no CUDA): tests/tools/test_watchdog.py.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass

from .messages import GpuJob, GpuOutcome

# How long a caller waits for an identical job in flight before running its own: longer than any job takes
# (the pool answers every job), short enough that a harness bug cannot block a trajectory for good.
WAIT_S = 1800.0


@dataclass(frozen=True)
class Hang:
    outcome: GpuOutcome
    turn: int | None  # the caller's turn when it hung (None: not told)


def job_key(job: GpuJob) -> str:
    """What decides a hang: the cubin, the plan, the workload and the job's options (not the pool's own fields)."""
    fields = job.model_dump(mode="json", exclude={"id", "cubin", "ceilings", "prepare_timeout_s"})
    text = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(job.cubin).hexdigest() + ":" + hashlib.sha256(text.encode()).hexdigest()


def reused_message(hang: Hang) -> str:
    when = f"at turn {hang.turn}" if hang.turn is not None else "earlier in this run"
    return (f"the same binary (identical cubin, launch plan, workload and options) timed out {when}; not run again. "
            f"Then: {hang.outcome.message}")


class HangMemo:
    """Thread-safe: the bench evaluates many trajectories at once through one evaluator."""

    def __init__(self) -> None:
        self._hangs: dict[str, Hang] = {}
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._hangs)

    def claim(self, key: str, wait_s: float = WAIT_S) -> tuple[Hang | None, bool]:
        """(the earlier hang of this key, or None; whether the caller now owns the key and must call `release`)."""
        while True:
            with self._lock:
                if key in self._hangs:
                    return self._hangs[key], False
                running = self._running.get(key)
                if running is None:
                    self._running[key] = threading.Event()
                    return None, True
            if not running.wait(wait_s):  # the identical job is still running: run this one too
                return None, False

    def release(self, key: str, outcome: GpuOutcome | None, turn: int | None) -> None:
        """The owner's job ended (outcome None: it raised); a TIMEOUT is remembered, and any waiter goes on."""
        with self._lock:
            if outcome is not None and outcome.status == "TIMEOUT":
                self._hangs[key] = Hang(outcome.model_copy(deep=True), turn)
            done = self._running.pop(key, None)
        if done is not None:
            done.set()
