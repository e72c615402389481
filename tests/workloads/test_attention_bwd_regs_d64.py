"""The backward's pair_d64_r40 and pair_causal_r40 variants (workloads/solutions/attention_bwd_variants/regs_d64.py):
the kernels with D = 64 writer warps split the CTA's registers 40 / 232. Checked here: the split is exactly the pool
(ptxas's launch registers, 168 x 384, against the setmaxnreg moves in the SASS), the causal D = 64 kernel compiles
without spills, pair_d64_r40's non-causal kernels spill less than pair_d64's, and every other kernel is its base's,
opcode for opcode. The speed: the GPU (bench/gpu_round.sh bwd-variants)."""
from __future__ import annotations

import pytest

from ptxbench.tools.regpool import pool_shortfall, setmaxnreg_moves
from ptxbench.tools.sass import disassemble

from bwd_variant_checks import D64, D96, D128, compile_variants


@pytest.fixture(scope="module")
def compiled():
    return compile_variants("mha_bwd_d64_causal", "pair_d64_r40+head_groups", "pair_causal_r40+head_groups",
                            "pair_d64+head_groups", "pair_causal+head_groups")


@pytest.mark.parametrize("variant,base,changed", [
    ("pair_d64_r40", "pair_d64", D64), ("pair_causal_r40", "pair_causal", ("attn_bwd_wgmma_d64_causal",))])
def test_the_split_fits_the_pool_and_takes_the_spills(compiled, variant, base, changed):
    mine, ref = compiled[f"{variant}+head_groups"], compiled[f"{base}+head_groups"]
    assert mine.status == "ok"
    listing = disassemble(mine.cubin_path)
    for name in changed:
        k = mine.kernels[name]
        moves = setmaxnreg_moves(listing[name])
        assert k.registers == 168 and pool_shortfall(k.registers, 384, moves) == 0, (name, moves)
        assert k.spill_stores < ref.kernels[name].spill_stores, name
        assert k.sass_opcodes["HGMMA"] == ref.kernels[name].sass_opcodes["HGMMA"], name
    assert mine.kernels["attn_bwd_wgmma_d64_causal"].spill_stores == 0
    for name in set(D128 + D96 + D64) - set(changed):
        assert mine.kernels[name].sass_opcodes == ref.kernels[name].sass_opcodes, name
