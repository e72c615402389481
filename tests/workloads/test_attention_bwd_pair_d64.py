"""The backward's pair_d64 variant (workloads/solutions/attention_bwd_variants/pair_d64.py): two writer warps in the
D = 64 kernels, one per consumer. Checked here: every kernel assembles within the CTA's register pool; the D = 64
consumers arrive on their writer's barriers and issue no reduction of their own, with the writers' reduce-adds in
their place; the D = 64 kernels' spills stay the few values ptxas 13.5 keeps across the warpgroups' parting and in the
producer's loop (a change that spills more fails here first); the 128-wide kernels are writer_d96's, opcode for
opcode; each D = 64 writer warp meets only its own consumer's barriers. The speed: the GPU (bench/gpu_round.sh
bwd-variants)."""
from __future__ import annotations

import pytest

from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

from bwd_variant_checks import D64, D96, D128, assert_within_pool, compile_variants


@pytest.fixture(scope="module")
def compiled():
    return compile_variants("mha_bwd_d64", "pair_d64+head_groups", "writer_d96+head_groups")


def test_the_d64_kernels_leave_their_reductions_to_their_writers(compiled):
    mine, ref = compiled["pair_d64+head_groups"], compiled["writer_d96+head_groups"]
    listing = assert_within_pool(mine)
    for name in D64:
        k, ops = mine.kernels[name], [i.opcode for i in listing[name]]
        # 8-24 bytes under ptxas 13.5: prologue values, and one 8-byte pair in the producer's loop
        assert k.spill_stores <= 24 and sum(op.startswith("STL") for op in ops) <= 4, (name, k.spill_stores)
        assert any(op.startswith("BAR.ARV") for op in ops), name
        assert k.sass_opcodes["HGMMA"] == ref.kernels[name].sass_opcodes["HGMMA"], name
        # the consumers' one reduce-add gives way to the writers' loop, unrolled
        assert k.sass_opcodes["UBLKRED"] > ref.kernels[name].sass_opcodes["UBLKRED"] == 1, name
    for name in D128 + D96:
        assert mine.kernels[name].sass_opcodes == ref.kernels[name].sass_opcodes, name
        assert mine.kernels[name].spill_stores == 0, name


def test_the_d64_block_publishes_through_its_own_writer():
    text = variant_text("pair_d64+head_groups")
    block = text[text.index("void consumer_block("):text.index("void store_dq_tile(")]
    assert "bulk_reduce_add(" not in block and "named_barrier_sync(3 + c, 128)" not in block
    assert block.index("named_barrier_sync(7 + c, 160);") < block.index("sts64(tile") < \
        block.index("named_barrier_arrive(5 + c, 160);")
    start = text.index("pair_d64: at D = 64 warp 1 + c serves consumer c alone")
    writer = text[start:text.index("\n    }\n  } else {", start)]
    # every barrier the writer meets is 5 + c or 7 + c of a c in [c0, c0 + NC): at D = 64 its own consumer's only
    assert "constexpr int NC = HD == 128 ? 2 : 1;" in writer and "const int c0 = HD == 128 ? 0 : t / 32 - 1;" in writer
    assert writer.count("for (int c = c0; c < c0 + NC; ++c)") == 2
    assert "named_barrier_arrive(7, 160)" not in writer and "named_barrier_arrive(8, 160)" not in writer
    # consumer 1's tile is narrow at D = 96 only
    assert "BM * (KD == 96 && c == 1 ? 32 : 64) * 4" in writer and "KD == 128 || c == 0" not in writer
