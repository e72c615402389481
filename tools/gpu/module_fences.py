"""Fences around a candidate module's data in the driver's module-data pool, checked after each candidate call.

The driver keeps every loaded module's globals and constants in one pool, packed one module after another (256-byte
aligned), and registers each global as a range of its own: memory between and past them is no allocation the host can
copy, yet a kernel reaches it from any global's address. On an H100, tests/data/cheats/attacks/global_tail_stash.cu
kept every input set's output 64 KiB past its only global (in the pool, past the module's last section) and replayed
them 11.5x faster than the same loop without the stash; the section reset (module_state.py) never reaches there, and
the memory cannot be reset, since other modules' data (torch's, the libraries', loaded lazily) may lie there.

So the candidate's module is loaded between two fences: a module of the harness's, one zero-filled global of
FENCE_BYTES, loaded just before it and another just after, which the pool places on each side of the candidate's data
(checked from their addresses: `adjacent`). A fence is the harness's own memory that nothing writes; a candidate call
that leaves any byte of it nonzero wrote past its module's data: RUNTIME_ERROR, OUT_OF_BOUNDS_WRITE. The check is a
device reduction read back with the call's other checks. A kernel that skips more than a fence's width lands beyond it,
unchecked (stated in docs/timing-integrity.md).
"""
from __future__ import annotations

FENCE_BYTES = 16 << 20
FENCE_NAME = "ptxbench_fence"
FENCE_PTX = f""".version 8.0
.target sm_90
.address_size 64
.visible .global .align 256 .b8 {FENCE_NAME}[{FENCE_BYTES}];
"""
# Slack the pool leaves between two modules' data (256-byte alignment, observed on an H100): more than this between a
# fence and the candidate's data means the driver placed them apart, and the fences do not border it
POOL_SLACK = 4096


def adjacent(before: tuple[int, int], data: list[tuple[int, int]], after: tuple[int, int],
             slack: int = POOL_SLACK) -> bool:
    """Whether fences (address, bytes) `before` and `after` border the module's data spans on both sides."""
    if not data:
        return False
    lo, hi = min(p for p, _ in data), max(p + n for p, n in data)
    end_before = before[0] + before[1]
    return end_before <= lo <= end_before + slack and hi <= after[0] <= hi + slack


class Fence:
    """One fence module: its global's address and a uint8 view of it (the CUDA array interface; no copy)."""

    def __init__(self, device="cuda"):
        import torch
        from cuda.bindings import driver as cu

        from .launch import check, load_module

        self.module = load_module(FENCE_PTX.encode() + b"\0")
        ptr, size = check(cu.cuModuleGetGlobal(self.module, FENCE_NAME.encode()), "cuModuleGetGlobal(fence)")
        self.span = (int(ptr), int(size))
        self.view = torch.as_tensor(_Device(*self.span), device=device)

    def written(self):
        """A device bool: any byte of the fence nonzero."""
        return self.view.any()

    def close(self) -> None:
        from .launch import unload_module

        unload_module(self.module)


class _Device:
    def __init__(self, ptr: int, n: int):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}


class Fences:
    """The two fences of one candidate module; `check()` gives the device bool the call's checks read back."""

    def __init__(self, before: Fence, after: Fence, data: list[tuple[int, int]]):
        self.before, self.after = before, after
        self.borders = adjacent(before.span, data, after.span)

    def check(self):
        import torch

        return torch.stack([self.before.written(), self.after.written()]).any()

    def close(self) -> None:
        self.before.close()
        self.after.close()
