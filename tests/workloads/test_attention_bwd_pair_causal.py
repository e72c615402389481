"""The backward's pair_causal variant (workloads/solutions/attention_bwd_variants/pair_causal.py): pair_d64's D = 64
writer warps in the causal kernel only. Checked here: every kernel is one the H200 measured, instruction for
instruction: the causal D = 64 kernel pair_d64's, every other kernel writer_d96's (the D = 64 non-causal and GQA ones
back to their own reduce-adds); and the D = 64 block chooses its way of publishing at compile time only."""
from __future__ import annotations

import pytest

from ptxbench.tools.sass import disassemble
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

from bwd_variant_checks import D64, D96, D128, compile_variants


@pytest.fixture(scope="module")
def listings():
    compiled = compile_variants("mha_bwd_d64_causal", "pair_causal+head_groups", "pair_d64+head_groups",
                                "writer_d96+head_groups")
    return {v: disassemble(r.cubin_path) for v, r in compiled.items()}


def _ops(listing, name):
    return [i.opcode for i in listing[name]]


def test_each_kernel_is_a_measured_one(listings):
    mine, pair, ref = (listings[v] for v in ("pair_causal+head_groups", "pair_d64+head_groups",
                                               "writer_d96+head_groups"))
    assert _ops(mine, "attn_bwd_wgmma_d64_causal") == _ops(pair, "attn_bwd_wgmma_d64_causal")
    assert _ops(mine, "attn_bwd_wgmma_d64_causal") != _ops(ref, "attn_bwd_wgmma_d64_causal")
    for name in D128 + D96 + ("attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_gqa"):
        assert _ops(mine, name) == _ops(ref, name), name
    assert [n for n in D64 if _ops(mine, n) != _ops(ref, n)] == ["attn_bwd_wgmma_d64_causal"]


def test_the_d64_block_chooses_at_compile_time():
    text = variant_text("pair_causal+head_groups")
    block = text[text.index("void consumer_block("):text.index("void store_dq_tile(")]
    assert "if constexpr (CAUSAL) named_barrier_sync(7 + c, 160);" in block
    causal, plain = block.split("  } else {  // pair_causal: the tile sent by this consumer")
    assert causal.rstrip().endswith("named_barrier_arrive(5 + c, 160);  // pair_d64: the tile is this consumer's "
                                    "writer's to reduce")
    assert "named_barrier_sync(3 + c, 128);" in plain and "bulk_reduce_add(dq_rows" in plain
    assert "} else if ((HD == 128 || CAUSAL) && (t / 32 == 1 || (HD == 64 && t / 32 == 2))) {" in text
