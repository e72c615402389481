"""Device memory that no live buffer holds, overwritten before every call.

The caching allocator keeps freed blocks mapped, and rounds every block up (a large one to 2 MB), so besides the
protocol's buffers the process maps: free blocks (what the last checks computed), the slack past each live tensor's
requested size (beside every input set's buffers). A kernel that found such a range could keep part of its output
there and copy it on a later call of the same input set. Before every call, the library's too, every range of at
least MIN_BYTES that no live tensor asked for is set to 0xFF (NaN as a float, -1 as an integer). First the cuBLAS
workspaces (32 MB on Hopper, room for a decode GEMM's whole output) are handed back to the allocator, so they are
cleared with the rest; the library's next call takes one again, in its own dispatch.

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
    """Hand back the cuBLAS workspaces, then overwrite every unowned range on `stream`; returns the bytes written.
    Run 16 handed them back too, and cuBLAS's M = 64 calls read slow: the new workspace's allocation, host work in the
    library's dispatch, was timed in its interval, which the launch gate (gate.py) now keeps out (run 17). Run 18's A/B
    on the H200 read it level: cuBLAS 0.0224-0.0226 ms without, 0.0226 ms with (bench/results/gpu_evaluator.md)."""
    import torch
    from cuda.bindings import driver as cu

    from .launch import check

    clear_blas = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_blas is not None:
        clear_blas()
    written = 0
    for address, size in unowned_ranges(torch.cuda.memory_snapshot()):
        check(cu.cuMemsetD8Async(cu.CUdeviceptr(address), FILL, size, cu.CUstream(stream)), "cuMemsetD8Async(unowned)")
        written += size
    return written
