"""A candidate's verdict from its buffers after a run: guard zones, every output against its reference,
untouched inputs; and `Failed`, the exception that ends an evaluation with a status. Free of CUDA driver
imports, so the verdict logic is tested on CPU tensors."""
from __future__ import annotations

from collections.abc import Callable

import torch

from ...workloads.inputs import judging_weights
from ...workloads.schema import Workload
from .buffers import BufferSet, count_poison
from .correctness import LibraryError, compare


class Failed(Exception):
    """Ends a candidate's evaluation with a status (not a harness error)."""

    def __init__(self, status: str, message: str, *, plan_errors=None, runtime_error: str = "", replace: bool = False):
        super().__init__(message)
        self.status, self.message = status, message
        self.plan_errors = plan_errors or []
        self.runtime_error = runtime_error
        self.replace = replace


def check_guards(bufs: BufferSet, counts: list[list[int]] | None = None) -> None:
    """Raise RUNTIME_ERROR (OUT_OF_BOUNDS_WRITE) when a guard zone around any buffer was written (`counts`: the
    set's guard_counts() already read by the caller)."""
    damaged = bufs.damaged_guards(counts)
    if damaged:
        raise Failed("RUNTIME_ERROR", "out-of-bounds write: the kernel wrote outside its buffers ("
                     + "; ".join(damaged) + ")", runtime_error="OUT_OF_BOUNDS_WRITE: " + "; ".join(damaged))


def judge_outputs(outputs: dict[str, torch.Tensor], inputs_seen: dict[str, torch.Tensor], data, wl: Workload, trial: int,
                  dist: str, library_errors: Callable[[], dict[str, LibraryError]] | None = None) -> list:
    """Every output against its reference, and the inputs the kernel saw against the true inputs; returns TrialStats.

    `library_errors` gives the primary library's error per output on these inputs; compare() calls it only
    for an output that fails the strict rule on error size alone (the calibrated rule, correctness.py)."""
    stats = []
    weights = judging_weights(wl, data.inputs)  # from the true inputs, never the ones the kernel saw
    for name, ref in data.reference.items():
        out = outputs[name]
        library = (lambda name=name: library_errors().get(name)) if library_errors else None
        stats.append(compare(out, ref, wl.tolerance.for_tensor(name), trial=trial, tensor=name, dist=dist,
                             unwritten=count_poison(out), library=library, weight=weights.get(name)))
    changed = [n for n, x in data.inputs.items() if not torch.equal(inputs_seen[n], x)]
    if changed:
        for s in stats:
            s.passed = False
            s.note = "; ".join(filter(None, [s.note, f"the kernel modified its input(s) {', '.join(changed)}"]))
    return stats


def judge(bufs: BufferSet, data, wl: Workload, trial: int, dist: str,
          library_errors: Callable[[], dict[str, LibraryError]] | None = None) -> list:
    """Guards, then every output and input of one buffer set (in-process: CPU tests and tools without a referee)."""
    check_guards(bufs)
    return judge_outputs({n: bufs.tensors[n].data for n in data.reference},
                         {n: bufs.tensors[n].data for n in data.inputs}, data, wl, trial, dist, library_errors)


def status_of(stats) -> str:
    if all(s.passed for s in stats):
        return "PASSED"
    if any(not s.passed and (s.n_nan or s.n_inf) for s in stats):
        return "INCORRECT_NAN"
    return "INCORRECT_NUMERICAL"
