"""Device memory no live buffer holds (tools/gpu/unowned.py): the ranges read from the caching allocator's snapshot,
on the CPU with snapshots written out as torch gives them; on the GPU, what a kernel left in a freed block and in a
buffer's slack is gone after the clear, and live tensors keep every bit."""
from __future__ import annotations

import pytest

from ptxbench.tools.gpu.unowned import MIN_BYTES, unowned_ranges

MB = 1 << 20


def test_free_blocks_and_the_slack_past_each_live_tensor_are_unowned():
    snapshot = [
        {"address": 0x1000_0000, "total_size": 20 * MB, "blocks": [
            {"size": 8 * MB, "requested_size": 7 * MB, "state": "active_allocated"},   # 1 MB of slack
            {"size": 4 * MB, "requested_size": 4 * MB, "state": "inactive"},           # freed: whole
            {"size": 6 * MB, "requested_size": 6 * MB, "state": "active_allocated"},   # no slack
            {"size": 2 * MB, "requested_size": 2 * MB, "state": "active_pending_free"},  # a stream still uses it
        ]},
        {"address": 0x2000_0000, "total_size": 2 * MB, "blocks": [
            {"size": 512, "requested_size": 4, "state": "active_allocated"},           # a scalar: slack too small
            {"size": 2 * MB - 512, "requested_size": 0, "state": "inactive"},
        ]},
    ]
    assert unowned_ranges(snapshot) == [
        (0x1000_0000 + 7 * MB, 1 * MB),
        (0x1000_0000 + 8 * MB, 4 * MB),
        (0x2000_0000 + 512, 2 * MB - 512),
    ]
    assert unowned_ranges(snapshot, min_bytes=1) [1:2] == [(0x1000_0000 + 8 * MB, 4 * MB)]
    assert (0x2000_0000 + 4, 508) in unowned_ranges(snapshot, min_bytes=1)
    assert MIN_BYTES == 64 * 1024


def test_block_addresses_are_used_when_the_snapshot_gives_them():
    snapshot = [{"address": 0x5000, "total_size": 3 * MB, "blocks": [
        {"address": 0x5000, "size": MB, "requested_size": MB, "state": "active_allocated"},
        {"address": 0x5000 + MB, "size": 2 * MB, "requested_size": MB, "state": "active_allocated"},
    ]}]
    assert unowned_ranges(snapshot) == [(0x5000 + 2 * MB, MB)]


@pytest.mark.gpu
def test_a_result_left_in_freed_memory_or_in_slack_is_gone_after_the_clear():
    import torch
    from cuda.bindings import driver as cu

    from ptxbench.tools.gpu.unowned import clear_unowned

    torch.cuda.empty_cache()
    live = torch.randn(3 * MB + 12345, device="cuda")  # 12 MB + slack up to the block's 2 MB rounding
    keep = live.clone()
    gone = torch.full((MB,), 7.0, device="cuda")  # a "result" in a block that is then freed
    address = gone.data_ptr()
    del gone
    slack_at = live.data_ptr() + live.numel() * 4 + 256 * 1024  # well past what was asked, however it was rounded
    probe = torch.empty(16, dtype=torch.int32)
    cu.cuMemsetD32(cu.CUdeviceptr(slack_at), 0x1234, 16)  # a "result" past the live tensor, in its block's slack
    stream = torch.cuda.current_stream().cuda_stream
    written = clear_unowned(stream)
    torch.cuda.synchronize()
    assert written >= 4 * MB
    for where in (address, slack_at):
        cu.cuMemcpyDtoH(probe.numpy(), cu.CUdeviceptr(where), 64)
        assert (probe == -1).all(), (hex(where), probe)  # every byte 0xFF
    assert torch.equal(live, keep)  # live tensors keep every bit


@pytest.mark.gpu
def test_a_result_left_in_the_cublas_workspace_is_gone_after_the_clear():
    """The cuBLAS workspace (32 MB on Hopper) is a live allocation beside the library: the clear hands it back first, so
    what a kernel left there is overwritten with the free blocks."""
    import torch
    from cuda.bindings import driver as cu

    from ptxbench.tools.gpu.unowned import clear_unowned

    def active() -> set[tuple[int, int]]:
        return {(int(b.get("address", seg["address"])), int(b["size"])) for seg in torch.cuda.memory_snapshot()
                for b in seg["blocks"] if b["state"] == "active_allocated"}

    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    torch._C._cuda_clearCublasWorkspaces()  # none held: the next call takes a new one
    torch.cuda.synchronize()
    before = active()
    torch.matmul(a, a, out=c)
    torch.cuda.synchronize()
    new = sorted(active() - before, key=lambda r: -r[1])
    address, size = new[0] if new else (None, 0)
    assert address is not None and size >= 4 * MB, new  # the workspace: the largest new live block
    cu.cuMemsetD32(cu.CUdeviceptr(address), 0x1234, size // 4)  # a "result" in it
    clear_unowned(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    probe = torch.empty(16, dtype=torch.int32)
    for where in (address, address + size - 64):
        cu.cuMemcpyDtoH(probe.numpy(), cu.CUdeviceptr(where), 64)
        assert (probe == -1).all(), (hex(where), probe)
    assert torch.equal(torch.matmul(a, a), c)  # and cuBLAS takes a workspace again and computes the same
