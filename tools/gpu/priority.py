"""The queue priority of an evaluation: the GPU time still to come behind it in its trajectory.

On several GPUs a bench ends when its longest trajectory does. Serving first the evaluations with the most GPU work
left behind them (their turns left, this one included, times what an evaluation of their workload holds a GPU
for) lets the heavy trajectories run ahead while the light ones fill the gaps, instead of every trajectory
advancing in step and the heaviest finishing alone (list scheduling, highest level first). What an evaluation
holds a GPU for is learnt as the run goes: a moving average per workload of its timing plus its profiler hold.
A priority only orders the queue; nothing measured depends on it (a timing always has its GPU alone).
"""
from __future__ import annotations

import threading

SMOOTHING = 0.3  # weight of the newest evaluation in a workload's moving average


class QueuePriority:
    def __init__(self) -> None:
        self._cost: dict[str, float] = {}
        self._lock = threading.Lock()

    def cost(self, workload: str) -> float:
        """Seconds of GPU an evaluation of `workload` holds; before the first one, the mean over the others (or 1)."""
        with self._lock:
            if workload in self._cost:
                return self._cost[workload]
            return sum(self._cost.values()) / len(self._cost) if self._cost else 1.0

    def of(self, workload: str, turns_left: int | None) -> float:
        """0 without a trajectory behind it (a single evaluation: served in arrival order among its like)."""
        if turns_left is None:
            return 0.0
        return (max(0, turns_left) + 1) * self.cost(workload)

    def learn(self, workload: str, gpu_seconds: float) -> None:
        if gpu_seconds <= 0:
            return
        with self._lock:
            old = self._cost.get(workload)
            self._cost[workload] = gpu_seconds if old is None else (1 - SMOOTHING) * old + SMOOTHING * gpu_seconds
