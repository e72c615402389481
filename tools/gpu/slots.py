"""The free GPUs of the pool, handed out by priority and then first come first served, to any device or to one
named device.

The priority is the work still to come behind a request (the evaluator's: its trajectory's turns left times what
an evaluation of its workload holds a GPU for), so on several GPUs the trajectories with the most GPU work left
run ahead and the run does not end with one long trajectory's last turns alone on one GPU (list scheduling,
highest level first). Requests without one (priority 0) are served in arrival order, as before.

A GPU job takes whichever device is free; a profiler replay must take the device its process was
started on (CUDA_VISIBLE_DEVICES is fixed at process start), so it asks for that one. A freed device goes
first to the requests that named it, then to those that take any device (which the next freed one serves as
well), so a replay is never overtaken on its own GPU; equal priorities are served in arrival order. A replay
names the device that is free, else the one the fewest replays already wait for (`least_loaded`), so two
replays do not queue for one GPU while the other idles.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class _Waiter:
    def __init__(self, device: int | None, priority: float):
        self.device = device
        self.priority = priority
        self.slot = None
        self.ready = threading.Event()


class SlotQueue(Generic[T]):
    """Slots with a `.device` attribute; `get(device=None)` blocks until a suitable one is free."""

    def __init__(self) -> None:
        self._free: list[T] = []
        self._waiters: deque[_Waiter] = deque()
        self._lock = threading.Lock()

    def put(self, slot: T) -> None:
        with self._lock:
            # a request that must have this device first (a job for any GPU can take the next one that frees)
            suited = ([w for w in self._waiters if w.device == slot.device]
                      or [w for w in self._waiters if w.device is None])
            if suited:
                w = max(suited, key=lambda w: w.priority)  # the first of the highest priority (max keeps the first)
                self._waiters.remove(w)
                w.slot = slot
                w.ready.set()
                return
            self._free.append(slot)

    def get(self, device: int | None = None, priority: float = 0.0) -> T:
        """A free slot (of `device` when named), else wait; waiters a freed slot suits are served highest `priority`
        first, in arrival order among equals."""
        with self._lock:
            for slot in self._free:
                if device is None or slot.device == device:
                    self._free.remove(slot)
                    return slot
            waiter = _Waiter(device, priority)
            self._waiters.append(waiter)
        waiter.ready.wait()
        return waiter.slot

    def least_loaded(self, devices: list[int], first: int = 0) -> int:
        """The device a request that must name its GPU ahead should name: a free one, else the one the fewest such
        requests already wait for; ties go round robin from `devices[first]`."""
        with self._lock:
            free = {s.device for s in self._free}
            pinned = {d: sum(w.device == d for w in self._waiters) for d in devices}
        order = devices[first % len(devices):] + devices[:first % len(devices)]
        return min(order, key=lambda d: (d not in free, pinned[d]))

    def qsize(self) -> int:
        """Free slots now (a snapshot, for tests and status lines)."""
        with self._lock:
            return len(self._free)
