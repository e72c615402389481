"""Device memory that no live buffer holds, overwritten before every call.

The caching allocator keeps freed blocks mapped, and rounds every block up (a large one to 2 MB), so besides the
protocol's buffers the process maps: free blocks (what the last checks computed), the slack past each live tensor's
requested size (beside every input set's buffers). A kernel that found such a range could keep part of its output
there and copy it on a later call of the same input set. Before every call, the library's too, every range of at
least MIN_BYTES that no live tensor asked for is set to 0xFF (NaN as a float, -1 as an integer). The cuBLAS workspace
(a live allocation, 32 MB on Hopper) is not: see clear_unowned.

The ranges come from the allocator's own snapshot (`torch.cuda.memory_snapshot()`): pure bookkeeping, tested on the
CPU with snapshots written out by hand.
"""
from __future__ import annotations

# Ranges smaller than this are left: room for a key or a counter, which gains a kernel nothing (every call is
# verified), not for a share of an output.
MIN_BYTES = 64 * 1024
FILL = 0xFF


def unowned_ranges(snapshot: list[dict], min_bytes: int = MIN_BYTES) -> list[tuple[int, int]]:
    """(address, bytes) of every range in the allocator's segments that no live tensor asked for: free blocks whole,
    and each live block's tail past its requested size. Blocks still in use by a stream (pending free) are left."""
    ranges = []
    for seg in snapshot:
        address = int(seg["address"])
        for block in seg["blocks"]:
            size = int(block["size"])
            start = int(block.get("address", address))
            state = block["state"]
            if state == "inactive":
                ranges.append((start, size))
            elif state == "active_allocated":
                asked = int(block.get("requested_size", size))
                if asked < size:
                    ranges.append((start + asked, size - asked))
            address = start + size
    return [(a, n) for a, n in ranges if n >= min_bytes]


def clear_unowned(stream: int) -> int:
    """Overwrite every unowned range on `stream`; returns the bytes written. The cuBLAS workspace is left alone: run 16
    handed it back before every call, and the M = 64 decode GEMM's cuBLAS then read 50% slower (1.48x [1.06, 1.82]
    for a kernel level with it), the one change that touched the library's side alone; without it the main GEMM's
    interval is as tight as before, and M = 64 reads 1.14x: a second cause remains (bench/results/reference_eval.md)."""
    import torch
    from cuda.bindings import driver as cu

    from .launch import check

    written = 0
    for address, size in unowned_ranges(torch.cuda.memory_snapshot()):
        check(cu.cuMemsetD8Async(cu.CUdeviceptr(address), FILL, size, cu.CUstream(stream)), "cuMemsetD8Async(unowned)")
        written += size
    return written
