"""What a worker keeps between candidates: device limits, ceilings, and an LRU of per-workload data.

Cached per (workload, seed, dist): the inputs and the float32 reference outputs, and (measured only
when a candidate first fails the strict rule on them) the primary library's error per output tensor,
which calibrates the rule where the library itself misses it; per (workload, baseline, seed, dist):
the library callable and, for the non-primary baselines, their timings. The
budget is a share of the GPU's memory, so a sweep over every workload fits an 80 GB card.
Candidates never receive these tensors: each run copies them into fresh guarded buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ...workloads.baselines import make_baseline
from ...workloads.inputs import make_inputs
from ...workloads.references import run_reference
from ...workloads.schema import Workload
from .cache import ByteLRU
from .correctness import LibraryError, library_error
from .limits import DeviceLimits

CHECK_SEED_OFFSET = 1000  # the repeat-call check draws inputs no trial used


def _nbytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass
class TrialData:
    inputs: dict[str, torch.Tensor]
    reference: dict[str, torch.Tensor]


@dataclass
class BaselineEntry:
    fn: object
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

    def trial_data(self, wl: Workload, seed: int, dist: str) -> TrialData:
        def make():
            inputs = make_inputs(wl, seed, dist, "cuda")
            reference = {k: v.float().contiguous() for k, v in run_reference(wl, inputs).items()}
            return TrialData(inputs, reference), _nbytes(inputs) + _nbytes(reference)

        return self.cache.get_or_make(("data", wl.id, seed, dist), make)

    def baseline(self, wl: Workload, name: str, seed: int, dist: str) -> BaselineEntry:
        data = self.trial_data(wl, seed, dist)

        def make():
            before = torch.cuda.memory_allocated()
            fn = make_baseline(wl, name, data.inputs)
            fn()
            torch.cuda.synchronize()
            return BaselineEntry(fn), max(0, torch.cuda.memory_allocated() - before)

        return self.cache.get_or_make(("baseline", wl.id, name, seed, dist), make)

    def library_errors(self, wl: Workload, seed: int, dist: str) -> dict[str, LibraryError]:
        """The primary baseline's error against the reference on these inputs, per output tensor (measured once)."""
        data = self.trial_data(wl, seed, dist)
        primary = wl.primary_baseline.name

        def make():
            outputs = self.baseline(wl, primary, seed, dist).fn()
            torch.cuda.synchronize()
            errors = {name: library_error(outputs[name], ref, wl.tolerance, primary)
                      for name, ref in data.reference.items()}
            return errors, 64 * len(errors)  # a few floats per tensor

        return self.cache.get_or_make(("library_error", wl.id, seed, dist), make)

    def get_ceilings(self) -> dict[str, float]:
        if not self.ceilings:
            from .ceilings import measure

            self.ceilings = measure()
        return self.ceilings
