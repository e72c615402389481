"""The backward's writer_pair variant (workloads/solutions/attention_bwd_variants/writer_pair.py): writer_d96 with two
writer warps, warp 1 + c of the producer warpgroup reducing consumer c's dQ tiles. Checked here: every kernel
assembles without spills and within the CTA's register pool; in the 128-wide kernels the writer code keeps the
consumers' side (their HGMMA, their arrivals) and holds one reduce-add per consumer where writer_d96's unrolled loop
held two; the D = 64 kernels are writer_d96's, opcode for opcode; and each writer warp meets only its own consumer's
barriers, once before the loop (7 + c) and once a block on each (5 + c, 7 + c), as a mirror of its lines counts. The
speed: the GPU (bench/gpu_round.sh bwd-variants)."""
from __future__ import annotations

import pytest

from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

from bwd_variant_checks import D64, D96, D128, assert_clean_within_pool, compile_variants


@pytest.fixture(scope="module")
def compiled():
    return compile_variants("mha_bwd_d96", "writer_pair+head_groups", "writer_d96+head_groups")


def test_two_writers_assemble_within_the_pool_and_leave_the_consumers_alone(compiled):
    mine, ref = compiled["writer_pair+head_groups"], compiled["writer_d96+head_groups"]
    listing = assert_clean_within_pool(mine)
    for name in D128 + D96:
        ops, ref_ops = mine.kernels[name].sass_opcodes, ref.kernels[name].sass_opcodes
        assert ops["HGMMA"] == ref_ops["HGMMA"], name
        # writer_d96's loop issues both consumers' reductions (unrolled over c); each writer warp's here, one
        # consumer's: exactly half the bulk reduce-adds (5 against 10 under ptxas 13.5)
        assert 2 * ops["UBLKRED"] == ref_ops["UBLKRED"], (name, ops["UBLKRED"], ref_ops["UBLKRED"])
        assert any(i.opcode.startswith("BAR.ARV") for i in listing[name]), name
    for name in D64:
        assert mine.kernels[name].sass_opcodes == ref.kernels[name].sass_opcodes, name


def test_each_writer_warp_meets_only_its_consumers_barriers():
    text = variant_text("writer_pair+head_groups")
    start = text.index("// writer_pair: warp 1 + c reduces consumer c's dQ tiles")
    writer = text[start:text.index("\n    }\n  } else {", start)]
    assert "const int c = t / 32 - 1;" in writer and "for (int c = 0; c < 2; ++c)" not in writer
    # before the loop: its consumer's tile is free (7 + c); in it: the stored tile (5 + c), then free again (7 + c)
    assert writer.count("named_barrier_arrive(7 + c, 160)") == 2 and writer.count("named_barrier_sync(5 + c, 160)") == 1
    assert "named_barrier_arrive(7, 160)" not in writer and "named_barrier_arrive(8, 160)" not in writer
    # the consumers' side is writer_d96's: each block syncs on 7 + c before its stores and arrives on 5 + c after
    ref = variant_text("writer_d96+head_groups")
    tail = text[text.index("\n    }\n  } else {", start):]
    assert tail == ref[ref.index("\n    }\n  } else {", ref.index("// dq_writer: the consumers' dQ tiles, reduced")):]
    # warps 1 and 2 of the producer warpgroup had no other role: nothing else branches on them
    assert text.count("t / 32 == 2") == 1
