"""What a worker keeps between candidates: device limits, ceilings, and an LRU of the library baselines.

The worker never holds an expected output: references and the library's error on a candidate's inputs
live in the referee process (referee.py). Cached here per (workload, baseline, dist, instance): the library
callable on inputs of the worker's own baseline seeds (drawn when the worker starts, never a candidate's),
with a pristine copy of them (the timed library calls get the same restore and checks as a candidate's:
calls.py), and for the non-primary baselines their timings. The budget is a share of the GPU's memory, so a sweep over every workload fits an 80 GB card.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import torch

from ...workloads.baselines import make_baseline
from ...workloads.inputs import make_inputs
from ...workloads.schema import Workload
from .cache import ByteLRU
from .limits import DeviceLimits


@dataclass
class BaselineEntry:
    fn: object
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    pristine: dict[str, torch.Tensor] = field(default_factory=dict)  # restored before every call, like a candidate's
    stats: dict = field(default_factory=dict)  # timing of a non-primary baseline, measured once


def _free(_key, _value) -> None:
    torch.cuda.empty_cache()


class WorkerState:
    def __init__(self, device_index: int, limits: DeviceLimits, cache_share: float = 0.4,
                 ceilings: dict[str, float] | None = None):
        self.device_index = device_index
        self.limits = limits
        self.cache = ByteLRU(int(limits.total_memory * cache_share), on_evict=_free)
        self.ceilings = dict(ceilings or {})
        self.jobs = 0
        self.baseline_seed = secrets.randbelow(2**31)
        self.referee = None  # RefereeClient: the process that holds the expected outputs (set by the worker)

    def baseline(self, wl: Workload, name: str, dist: str, index: int = 0) -> BaselineEntry:
        """The library on the worker's own baseline inputs (same shapes and distribution as a candidate's); `index`
        gives instances on distinct inputs and buffers, so the library rotates among sets as a candidate does."""

        def make():
            before = torch.cuda.memory_allocated()
            inputs = make_inputs(wl, self.baseline_seed + index, dist, "cuda")
            fn = make_baseline(wl, name, inputs)
            fn()
            torch.cuda.synchronize()
            entry = BaselineEntry(fn, inputs, {k: v.clone() for k, v in inputs.items()})
            return entry, max(0, torch.cuda.memory_allocated() - before)

        return self.cache.get_or_make(("baseline", wl.id, name, dist, index), make)

    def get_ceilings(self) -> dict[str, float]:
        if not self.ceilings:
            from .ceilings import measure

            self.ceilings = measure()
        return self.ceilings
