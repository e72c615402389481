"""TIMEOUT verdicts remembered for an evaluator's lifetime, so an identical binary that hung is not run again.

A model that resubmits a hanging kernel unchanged (the repair track's do-nothing model does it every turn; so
do real models) would cost the watchdog's whole limit plus a worker replacement each time. The key is what
decides whether the kernel hangs: the cubin's bytes, the resolved launch plan, the workload and every option of
the job (trials, distribution, seed, timing, the timeout); only TIMEOUT is remembered (a fault, a wrong answer
or a pass is always evaluated again). An identical job already in flight is waited for when running beside it
would gain nothing: no GPU is free (it would queue behind that job anyway), or that job has already run longer than
an honest evaluation takes (it probably hangs). So two trajectories submitting the same kernel on one GPU (turn 0 of a
repair task under two models) run it once, and identical passing kernels on a machine with a free GPU run side by
side instead of one after the other.
Pure logic (no torch, no CUDA): tests/tools/test_watchdog.py.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .messages import GpuJob, GpuOutcome

# How long a caller waits for an identical job in flight before running its own: longer than any job takes
# (the pool answers every job), short enough that a harness bug cannot block a trajectory for good.
WAIT_S = 1800.0
# An identical job in flight longer than this is suspected of hanging: waited for even with a GPU free. Honest
# evaluations take 1-15 s of GPU time; a hang is known only at the watchdog's limit.
SUSPECT_S = 20.0


@dataclass
class _InFlight:
    done: threading.Event = field(default_factory=threading.Event)
    since: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Hang:
    outcome: GpuOutcome


def job_key(job: GpuJob) -> str:
    """What decides a hang: the cubin, the plan, the workload and the job's options (not the pool's own fields)."""
    drawn = {"seed", "seed_drawn"} if job.seed_drawn else set()  # a fresh draw per evaluation is not an option
    fields = job.model_dump(mode="json", exclude={"id", "cubin", "ceilings", "prepare_timeout_s"} | drawn)
    text = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(job.cubin).hexdigest() + ":" + hashlib.sha256(text.encode()).hexdigest()


def reused_message(hang: Hang) -> str:
    """What the model hears of a remembered hang. No turn number: the memo serves every trajectory of the evaluator,
    and the turn it hung in may be another trajectory's (another model's), which would mislead this one and tell it
    of a run it is not part of."""
    return ("the same binary (identical cubin, launch plan, workload and options) timed out when it was evaluated "
            f"earlier in this run; not run again. Then: {hang.outcome.message}")


class HangMemo:
    """Thread-safe: the bench evaluates many trajectories at once through one evaluator."""

    def __init__(self) -> None:
        self._hangs: dict[str, Hang] = {}
        self._running: dict[str, _InFlight] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._hangs)

    def claim(self, key: str, wait_s: float = WAIT_S, gpu_free: Callable[[], bool] = lambda: False,
              suspect_s: float = SUSPECT_S) -> tuple[Hang | None, bool]:
        """(the earlier hang of this key, or None; whether the caller now owns the key and must call `release`).
        `gpu_free` says whether a GPU could take the job now: then a young identical job is not waited for."""
        while True:
            with self._lock:
                if key in self._hangs:
                    return self._hangs[key], False
                running = self._running.get(key)
                if running is None:
                    self._running[key] = _InFlight()
                    return None, True
                age = time.monotonic() - running.since
            if age < suspect_s and gpu_free():  # run beside it: waiting would only leave a GPU idle
                return None, False
            if not running.done.wait(wait_s):  # the identical job is still running: run this one too
                return None, False

    def release(self, key: str, outcome: GpuOutcome | None) -> None:
        """The owner's job ended (outcome None: it raised); a TIMEOUT is remembered, and any waiter goes on."""
        with self._lock:
            if outcome is not None and outcome.status == "TIMEOUT":
                self._hangs[key] = Hang(outcome.model_copy(deep=True))
            done = self._running.pop(key, None)
        if done is not None:
            done.done.set()
