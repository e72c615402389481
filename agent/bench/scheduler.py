"""Run many blocking jobs concurrently from asyncio: a global limit on jobs in flight (a free slot goes to the model
with the fewest trajectories running), and per-provider
limits on model calls in flight (a model wrapped in LimitedModel waits for its provider's slot).

Trajectories are blocking (LangGraph invoke); each runs on a thread of our own executor (asyncio's
default one has only cpu+4 threads), while GPU evaluations queue in the evaluator's worker pool.
"""
from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from .matrix import provider
from ..models.base import CallStopped, Model, ModelReply, ModelRequest

DEFAULT_PROVIDER_LIMIT = 8


class ProviderGates:
    """One semaphore per provider, created on first use."""

    def __init__(self, limits: dict[str, int] | None = None, default: int = DEFAULT_PROVIDER_LIMIT):
        self.limits = dict(limits or {})
        self.default = default
        self._gates: dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def gate(self, model_name: str) -> threading.BoundedSemaphore:
        key = provider(model_name)
        with self._lock:
            if key not in self._gates:
                self._gates[key] = threading.BoundedSemaphore(self.limits.get(key, self.default))
            return self._gates[key]


class BenchInterrupted(CallStopped):
    """The bench is stopping (Ctrl-C): raised instead of a new model call; `--resume` makes that call."""


class LimitedModel:
    """A Model whose calls wait for a slot of their provider's semaphore, and are not made once `stopping` is set."""

    def __init__(self, inner: Model, gate: threading.BoundedSemaphore, stopping: threading.Event | None = None):
        self.inner = inner
        self.gate = gate
        self.stopping = stopping
        self.name = inner.name
        if hasattr(inner, "sleep"):  # a back-off makes no call: its slot goes to the provider's other calls meanwhile
            inner.sleep = self._sleep_without_slot

    def _sleep_without_slot(self, seconds: float) -> None:
        self.gate.release()
        try:
            if self.stopping is None:
                time.sleep(seconds)
            elif self.stopping.wait(seconds):  # stopping: no further attempt, and no wait for it
                raise BenchInterrupted("the bench was stopped during a model call's back-off; --resume makes the call")
        finally:
            self.gate.acquire()

    def query(self, request: ModelRequest) -> ModelReply:
        with self.gate:
            if self.stopping is not None and self.stopping.is_set():
                raise BenchInterrupted("the bench was stopped before this model call; --resume makes it")
            return self.inner.query(request)

    def __getattr__(self, item: str) -> Any:
        return getattr(self.inner, item)


async def run_all(jobs: Iterable[Any], work: Callable[[Any], Any], parallel: int,
                  on_done: Callable[[Any, Any], None] | None = None,
                  on_cancel: Callable[[], None] | None = None,
                  share: Callable[[Any], Any] | None = None,
                  fatal: tuple[type[BaseException], ...] = ()) -> list[Any]:
    """Run work(job) for every job, at most `parallel` at once; results (or exceptions) in job order. Cancelled
    (Ctrl-C), no job starts any more and `on_cancel` tells those in flight to stop before the pool waits for them.

    `share(job)` names the party a job belongs to (the bench: its model): a free slot goes to the party with the
    fewest jobs in flight (then the fewest started), so one model's many cells (or slow trajectories) do not hold
    every slot while another model waits behind them in the list, and a stopped run has made like progress on each;
    slots no other party can use still go to it.

    A job raising one of `fatal` ends the run as a cancel does (the bench: no GPU worker left for any job)."""
    jobs = list(jobs)
    share = share or (lambda job: None)
    queues: dict[Any, deque[int]] = {}  # in order of first appearance: ties go to the party listed first
    for i, job in enumerate(jobs):
        queues.setdefault(share(job), deque()).append(i)
    running: Counter = Counter()
    started: Counter = Counter()
    results: list[Any] = [None] * len(jobs)
    loop = asyncio.get_running_loop()

    def next_job() -> int:
        party = min((p for p, q in queues.items() if q), key=lambda p: (running[p], started[p]))
        running[party] += 1
        started[party] += 1
        return queues[party].popleft()

    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="trajectory") as pool:
        async def one(i: int) -> None:
            job = jobs[i]
            try:
                result = await loop.run_in_executor(pool, work, job)
            except fatal:
                raise
            except Exception as exc:  # noqa: BLE001 - one trajectory's harness failure must not stop the others
                result = exc
            results[i] = result
            running[share(job)] -= 1
            if on_done is not None:
                try:
                    on_done(job, result)
                except Exception as exc:  # noqa: BLE001 - a progress line that cannot be shown must not stop the bench
                    with contextlib.suppress(OSError):  # stderr may be the broken pipe itself
                        print(f"warning: on_done failed: {type(exc).__name__}: {exc}", file=sys.stderr)

        async def tick():
            # A Ctrl-C that the kernel hands to a trajectory thread only flags the main thread, which runs the handler
            # (asyncio's: cancel this task) when it next runs Python: blocked in the loop's select with nothing due,
            # that waited for a trajectory to end. A short timer keeps the handler's wait under a quarter second.
            while True:
                await asyncio.sleep(0.25)

        ticker = asyncio.ensure_future(tick())
        in_flight: set[asyncio.Task] = set()
        try:
            while in_flight or any(queues.values()):
                while len(in_flight) < parallel and any(queues.values()):
                    in_flight.add(asyncio.ensure_future(one(next_job())))
                done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # one() keeps its job's exception as the result: what is raised here is the harness's
            return results
        except BaseException:
            for task in in_flight:
                task.cancel()
            if on_cancel is not None:  # else the pool's exit waits for every job in flight to run to its end
                on_cancel()
            raise
        finally:
            ticker.cancel()
