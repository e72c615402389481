"""The backward's writer_d96 variant (workloads/solutions/attention_bwd_variants/writer_d96.py): dq_writer's writer warp
reducing the D = 96 kernels' dQ tiles too. Checked here: it assembles without spills and within the CTA's register
pool, the D = 96 blocks arrive on the writer's barrier and leave their reductions to it, and every other kernel is
dq_writer's, opcode for opcode. The barrier protocol is dq_writer's (each block: barrier 1, then 7 + c, then an arrival
on 5 + c, the dead causal block included), mirrored in test_attention_bwd_dq_writer.py. The speed: the GPU
(bench/gpu_round.sh bwd-variants)."""
from __future__ import annotations

import pytest

from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

from bwd_variant_checks import D64, D96, D128, assert_clean_within_pool, compile_variants


@pytest.fixture(scope="module")
def compiled():
    return compile_variants("mha_bwd_d96", "writer_d96+head_groups", "dq_writer+head_groups")


def test_the_d96_kernels_leave_their_reductions_to_the_writer(compiled):
    mine, ref = compiled["writer_d96+head_groups"], compiled["dq_writer+head_groups"]
    listing = assert_clean_within_pool(mine)
    for name in D96:
        ops = [i.opcode for i in listing[name]]
        assert any(op.startswith("BAR.ARV") for op in ops), name  # the consumers arrive on 5 + c
        assert mine.kernels[name].sass_opcodes["HGMMA"] == ref.kernels[name].sass_opcodes["HGMMA"], name
        # the writer's reductions, unrolled in its loop, replace the consumers' two (one in the block, one after)
        assert mine.kernels[name].sass_opcodes["UBLKRED"] > ref.kernels[name].sass_opcodes["UBLKRED"] == 2, name
    for name in D128 + D64:
        assert mine.kernels[name].sass_opcodes == ref.kernels[name].sass_opcodes, name


def test_no_d96_block_keeps_a_pending_tile():
    text = variant_text("writer_d96+head_groups")
    late = text[text.index("void consumer_block_late("):text.index("void consumer_block_dead(")]
    dead = text[text.index("void consumer_block_dead("):text.index("void store_rows16(") if "void store_rows16(" in text
                else None]
    for block in (late, dead):
        assert "bulk_reduce_add(" not in block and "bulk_wait_read(" not in block
        assert "named_barrier_sync(7 + c, 160);" in block and "named_barrier_arrive(5 + c, 160);" in block
    assert "dq_late: the last block's dQ tile" not in text  # the writer reduces the last tile too
