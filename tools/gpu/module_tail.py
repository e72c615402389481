"""The memory the driver maps around a candidate module's data that no symbol of it owns, watched across each call.

The restore (module_state.py) puts the module's own sections back before every call. But the driver places a module's
data inside a larger allocation (cuMemGetAddressRange names it), and the rest of that allocation is reachable from any
global's address: tests/data/cheats/attacks/global_tail_stash.cu kept every input set's output 64 KiB past its only
global, and on an H100 it replayed them 11x faster than the same loop without the stash. That memory cannot be reset:
other modules (the libraries' and torch's, loaded lazily) may live there. So it is watched instead: a copy is taken
(into pageable host memory) after each call's preparation, and a candidate call that leaves it changed wrote memory outside its buffers and its
module's data (RUNTIME_ERROR, OUT_OF_BOUNDS_WRITE). Only the candidate's own calls are judged: a library call may load
a module there. CandidateCalls.rehearse runs the harness's side of a call once first, so no module the harness itself
loads lazily lands there during a judged call.
"""
from __future__ import annotations

from collections.abc import Callable

# A bound on the bytes watched, so a driver that reports a very large allocation costs a bounded copy per call: the
# pieces nearest the module's data are kept (a stash must be addressed from a global, and past this it is not watched)
WATCH_LIMIT = 64 << 20


def outside(extent: tuple[int, int], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces (address, bytes) of `extent` (address, bytes) that no span (address, bytes) covers, in order."""
    base, size = extent
    pieces, at = [], base
    for ptr, n in sorted(spans):
        lo, hi = max(ptr, base), min(ptr + n, base + size)
        if hi <= lo:
            continue
        if lo > at:
            pieces.append((at, lo - at))
        at = max(at, hi)
    if at < base + size:
        pieces.append((at, base + size - at))
    return pieces


def nearest(pieces: list[tuple[int, int]], spans: list[tuple[int, int]], limit: int = WATCH_LIMIT) -> list[tuple[int, int]]:
    """At most `limit` bytes of `pieces`, taken outward from the spans: half below the module's data and half above
    (what one side does not need goes to the other), each piece trimmed at its far end."""
    if not spans:
        return []
    lo = min(p for p, _ in spans)
    below = sorted((p for p in pieces if p[0] + p[1] <= lo), key=lambda p: -p[0])
    above = sorted((p for p in pieces if p[0] + p[1] > lo), key=lambda p: p[0])

    def take(side: list[tuple[int, int]], budget: int, downward: bool) -> tuple[list[tuple[int, int]], int]:
        kept, used = [], 0
        for ptr, n in side:
            if used >= budget:
                break
            part = min(n, budget - used)
            kept.append((ptr + n - part, part) if downward else (ptr, part))  # the part nearest the module's data
            used += part
        return kept, used

    room_below = sum(n for _, n in below)
    kept_above, used_above = take(above, limit - min(limit // 2, room_below), downward=False)
    kept_below, _ = take(below, limit - used_above, downward=True)
    return sorted(kept_below + kept_above)


def watched_pieces(spans: list[tuple[int, int]], address_range: Callable[[int], tuple[int, int] | None],
                   limit: int = WATCH_LIMIT) -> list[tuple[int, int]]:
    """What to watch for a module whose own data is `spans`: every allocation holding a span (address_range gives
    (base, bytes), or None where the driver names none), less the spans themselves, nearest first up to `limit`."""
    extents = {r for r in (address_range(ptr) for ptr, n in spans if n) if r is not None and r[1] > 0}
    pieces = [p for e in sorted(extents) for p in outside(e, spans)]
    return nearest(pieces, [s for s in spans if s[1]], limit)


def driver_range(ptr: int) -> tuple[int, int] | None:
    """(base, bytes) of the allocation the driver says holds `ptr`: cuMemGetAddressRange, else the pointer's range
    attributes; None where neither names one."""
    from cuda.bindings import driver as cu

    ok = cu.CUresult.CUDA_SUCCESS
    err, base, size = cu.cuMemGetAddressRange(cu.CUdeviceptr(ptr))
    if err == ok and int(size) > 0:
        return int(base), int(size)
    a = cu.CUpointer_attribute
    err_b, base = cu.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, cu.CUdeviceptr(ptr))
    err_s, size = cu.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_RANGE_SIZE, cu.CUdeviceptr(ptr))
    if err_b == ok and err_s == ok and int(size) > 0:
        return int(base), int(size)
    return None


class _Device:
    """A device range as a uint8 array torch can wrap (the CUDA array interface; no copy)."""

    def __init__(self, ptr: int, n: int):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}


class ModuleTail:
    """The watched memory around one loaded module (`views`: uint8 tensors over it): snapshot() after a call's
    preparation, changed() after the call. Both copies are read into pageable host memory, which no kernel can reach:
    a copy kept on the device (or in pinned host memory, mapped for the device) could be rewritten by the same kernel
    to match what it left there."""

    def __init__(self, views: list):
        self.views = views
        self.before: list = []
        self.nbytes = sum(int(v.numel()) for v in views)

    @classmethod
    def over(cls, pieces: list[tuple[int, int]], device="cuda") -> "ModuleTail":
        import torch

        return cls([torch.as_tensor(_Device(ptr, n), device=device) for ptr, n in pieces])

    def snapshot(self) -> None:
        self.before = [view.to("cpu", copy=True) for view in self.views]

    def changed(self) -> bool:
        import torch

        return any(not torch.equal(view.cpu(), was) for view, was in zip(self.views, self.before))
