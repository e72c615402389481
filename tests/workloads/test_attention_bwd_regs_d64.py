"""The backward's pair_d64_r40 variant (workloads/solutions/attention_bwd_variants/regs_d64.py), the reference: the
D = 64 kernels, whose writer warps share the producer warpgroup, split the CTA's registers 40 / 232. Checked here:
the split is exactly the pool (ptxas's launch registers, 168 x 384, against the setmaxnreg moves in the SASS), the
causal D = 64 kernel compiles without spills and the non-causal ones with fewer than pair_d64's, and the 128-wide
kernels are pair_d64's (writer_d96's), opcode for opcode. The speed: the GPU (bench/gpu_round.sh bwd-variants)."""
from __future__ import annotations

import pytest

from ptxbench.tools.regpool import setmaxnreg_moves

from bwd_variant_checks import D64, D96, D128, assert_within_pool, compile_variants


@pytest.fixture(scope="module")
def compiled():
    return compile_variants("mha_bwd_d64_causal", "pair_d64_r40+head_groups", "pair_d64+head_groups")


def test_the_split_fits_the_pool_and_takes_the_spills(compiled):
    mine, ref = compiled["pair_d64_r40+head_groups"], compiled["pair_d64+head_groups"]
    listing = assert_within_pool(mine)
    for name in D64:
        k = mine.kernels[name]
        moves = setmaxnreg_moves(listing[name])
        assert k.registers == 168, (name, k.registers)
        assert (moves.dec, moves.inc) == ([40], [232]), (name, moves)
        assert k.spill_stores < ref.kernels[name].spill_stores, name
        assert k.sass_opcodes["HGMMA"] == ref.kernels[name].sass_opcodes["HGMMA"], name
    assert mine.kernels["attn_bwd_wgmma_d64_causal"].spill_stores == 0
    for name in ("attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_gqa"):  # prologue values (REFERENCE_SPILLS in the
        assert mine.kernels[name].spill_stores <= 12 and mine.kernels[name].spill_loads <= 32, name  # mutation tests)
    for name in D128 + D96:
        assert mine.kernels[name].sass_opcodes == ref.kernels[name].sass_opcodes, name
