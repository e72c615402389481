"""Profiles in flight, by cubin: a second trajectory passing the same binary waits for the first one's profile.

The evaluator keeps the profile of every cubin it measured and reuses it for an identical one (the counts of one
binary on one GPU do not change between submissions). Without this, identical kernels passing at the same time
(the bench's reference trajectories, a tuner resubmitting its best) each took their own Nsight Compute run, since
neither was finished when the other looked: on two GPUs that doubled the GPU time spent in replays. Waiting is
never slower than profiling again: the run in flight started earlier and does the same work. A profile in flight
at a weaker level (the verdict's counters, when the full per-line profile is wanted) is not waited for.
Pure logic (no CUDA): tests/tools/test_profile_inflight.py.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..evaluator import serves

# A profile takes seconds to a minute; this bounds a wait on a harness bug, after which the caller profiles itself.
WAIT_S = 900.0


@dataclass
class _Run:
    level: str
    done: threading.Event = field(default_factory=threading.Event)


class InFlightProfiles:
    def __init__(self) -> None:
        self._runs: dict[tuple, _Run] = {}
        self._lock = threading.Lock()

    def running(self, key: tuple, level: str) -> bool:
        """Whether a profile of `key` at `level` or a stronger one is being taken now."""
        with self._lock:
            run = self._runs.get(key)
            return run is not None and serves(run.level, level)

    def acquire(self, key: tuple, level: str, cached: Callable[[], bool], wait_s: float = WAIT_S) -> tuple[bool, bool]:
        """(whether the caller must profile, whether it must call `release(key)` after storing its profile).
        Returns (False, False) once `cached()` holds what the caller needs, possibly after waiting for a run in
        flight; (True, ...) when nothing usable is in flight or the one waited for left nothing usable (it failed)."""
        while True:
            with self._lock:
                if cached():
                    return False, False
                run = self._runs.get(key)
                if run is None:
                    self._runs[key] = _Run(level)
                    return True, True
                if not serves(run.level, level):  # a weaker one in flight: it would not do
                    return True, False
                done = run.done
            if not done.wait(wait_s):
                return True, False

    def release(self, key: tuple) -> None:
        with self._lock:
            run = self._runs.pop(key, None)
        if run is not None:
            run.done.set()
