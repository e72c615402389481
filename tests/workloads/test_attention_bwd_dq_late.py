"""The backward's dq_late variant (workloads/solutions/attention_bwd_variants/dq_late.py): the 128-wide block's dQ tile
published by the next block's dS^T fence and barrier. What its correctness rests on, checked in the rendered text and
the SASS: in the block, the one fence comes before the 256-thread barrier and the previous tile's reduce-add after it;
the tile is rewritten only after that reduce-add's read is waited for and a barrier of the consumer's 128 threads; the
last tile leaves after the loop behind its own fence and barrier, before the final wait. In the loop's SASS one
MEMBAR + FENCE.VIEW.ASYNC.S pair is left (two in pre_wide's, its base). Its speed is measured on the GPU (attention_bwd.md
v17)."""
from __future__ import annotations

import pytest

from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

from sass_order import sass_ops


def _block(text: str) -> str:
    start = text.index("__device__ __forceinline__ void consumer_block_pf(")
    return text[start:text.index("\n}\n", start)]


def _order(text: str, *needles: str) -> list[int]:
    at, out = 0, []
    for n in needles:
        at = text.index(n, at)
        out.append(at)
    return out


def test_the_block_publishes_the_previous_tile_and_waits_before_rewriting_it():
    block = _block(variant_text("dq_late+head_groups"))
    _order(block, "fence_proxy_async();", "named_barrier_sync(1, 256);",
           "if (t == 0 && pending != nullptr) bulk_reduce_add(pending, tile, BM * W * 4);",
           "wgmma_wait<0>();               // dV and dK are done",
           "if (t == 0) bulk_wait_read();", "named_barrier_sync(3 + c, 128);",
           "store_dq_tile<64>(tile, dq, r, col0);", "pending = dq_rows + static_cast<size_t>(q0) * D + 64 * 64 * c;")
    assert block.count("fence_proxy_async();") == 1 and block.count("bulk_wait_read();") == 1
    assert block.count("bulk_reduce_add(") == 1  # the tile stored in this block leaves with the next one


def test_the_last_tile_leaves_after_the_loop_before_the_final_wait():
    text = variant_text("dq_late+head_groups")
    kernel = text[text.index("float* pending = nullptr;"):]
    _order(kernel, "sl2, sdQ, pending);", "fence_proxy_async();", "named_barrier_sync(3 + c, 128);",
           "bulk_reduce_add(pending, sdQ + c * BM * 64, BM * (KD == 128 || c == 0 ? 64 : 32) * 4);",
           "bulk_wait_all();")


def _loop(ops: list[str]) -> list[str]:
    """The consumer's block loop: the shortest back edge around the first wgmma wait, from its target to it (an
    instruction is 16 bytes, so BRA 0xA jumps to instruction A / 16)."""
    first = next(i for i, o in enumerate(ops) if o.startswith("WARPGROUP.DEPBAR"))
    edges = [(int(o.split()[-1], 16) // 16, i) for i, o in enumerate(ops) if o.startswith("BRA 0x")]
    start, end = min(((a, b) for a, b in edges if a <= first < b), key=lambda e: e[1] - e[0])  # not a retry stub's
    return ops[start:end + 1]


@pytest.mark.parametrize("kernel", ["attn_bwd_wgmma", "attn_bwd_wgmma_d96_causal"])
def test_one_proxy_fence_is_left_in_the_loop(kernel):
    """In the block loop pre_wide (dq_late's base) has two MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S pairs (dS^T's, dQ's), dq_late one; its
    reduce-add comes right after the 256-thread barrier, and its wait for the read before the consumer's barrier."""
    def sync_ops(name: str) -> list[str]:
        return [o.split()[0] for o in _loop(sass_ops(variant_text(name), kernel))
                if o.startswith(("FENCE", "MEMBAR", "BAR.SYNC", "UBLKRED", "DEPBAR"))]
    old, new = sync_ops("pre_wide+head_groups"), sync_ops("dq_late+head_groups")
    assert old.count("FENCE.VIEW.ASYNC.S") == old.count("MEMBAR.ALL.CTA") == 2, old
    assert new.count("FENCE.VIEW.ASYNC.S") == new.count("MEMBAR.ALL.CTA") == 1, new
    assert new == ["MEMBAR.ALL.CTA", "FENCE.VIEW.ASYNC.S", "BAR.SYNC.DEFER_BLOCKING", "UBLKRED.G.S.ADD.F32.RN",
                   "DEPBAR.LE", "BAR.SYNC.DEFER_BLOCKING"], new
