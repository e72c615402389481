"""The backward's dq_stmatrix variant (workloads/solutions/attention_bwd_variants/dq_stmatrix.py): the fp32 dQ tile
written by stmatrix in a layout made for it, and attn_bwd_post reading that layout back. Mirrored from its lines:
every fragment element lands where attn_bwd_post looks for its (row, column), each matrix's 8 rows fall on 8
different groups of banks, attn_bwd_post covers every output once; it assembles clean with the tile's stores as
stmatrix. Its speed and correctness on the GPU: attention_bwd.md v16."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.dq_stmatrix import POST_KERNEL, STORE_HELPER
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text


def _fragment(lane: int, warp: int, j: int) -> tuple[int, int]:
    """(row, column) of dq element j of a thread (the wgmma m64n64 accumulator layout)."""
    return 16 * warp + lane // 4 + 8 * ((j // 2) % 2), 8 * (j // 4) + 2 * (lane % 4) + j % 2


def _stmatrix_tile(w: int) -> dict[int, tuple[int, int]]:
    """store_dq_tile_stsm<W>'s lines under stmatrix.m8n8.x4: byte in the tile -> (row, column) of the value there.
    Instruction g stores dq[4 g + m] as matrix m; a lane holds word lane % 4 of row lane / 4 of each matrix and
    gives the address of row lane % 8 of matrix lane / 8."""
    out = {}
    for warp in range(4):
        def row_address(g: int, lane: int) -> int:
            m = lane // 8
            row = 16 * warp + lane % 8 + 8 * (m // 2)
            return row * w * 4 + 16 * ((2 * g + m % 2) ^ (row % 8))
        for g in range(w // 8):
            for m in range(4):
                for lane in range(32):
                    byte = row_address(g, 8 * m + lane // 4) + 4 * (lane % 4)
                    assert byte not in out
                    out[byte] = _fragment(lane, warp, 4 * g + m)
    return out


def _post_source(rr: int, d: int, D: int) -> int:
    """attn_bwd_post's lines: the float offset, inside a 64-row block of dQacc, of row rr, column d."""
    c, g, e = d // 64, (d % 64) // 8, d % 8
    w = min(64, D - 64 * c)
    half = 64 * 64 * c + rr * w
    return half + 4 * ((2 * g + e % 2) ^ (rr & 7)) + e // 2  # ev / od's float e // 2


def test_the_mirrors_are_the_variants_text():
    helper = STORE_HELPER[1]
    assert "const int row = 16 * (t / 32) + lane % 8 + 8 * (m / 2);" in helper
    assert "stmatrix_x4(base + 16 * ((2 * g + m % 2) ^ (row % 8)), __float_as_uint(dq[4 * g])" in helper
    assert "const float4 ev = *reinterpret_cast<const float4*>(half + 4 * ((2 * g) ^ (rr & 7)));" in POST_KERNEL
    assert "const float4 od = *reinterpret_cast<const float4*>(half + 4 * ((2 * g + 1) ^ (rr & 7)));" in POST_KERNEL
    assert "__floats2bfloat162_rn(ev.x * scale, od.x * scale)" in POST_KERNEL  # output columns 8 g + 0, + 1 first
    text = variant_text("dq_stmatrix")
    assert "store_dq_tile_stsm<64>(tile, dq, t);" in text and "store_dq_tile_stsm<32>(tile, dq, t);" in text
    assert "sts64(tile + row * W" not in text  # the D = 64 block's old stores are gone too


@pytest.mark.parametrize("D", [64, 96, 128])
def test_every_value_lands_where_the_postprocess_reads_it(D):
    """Per 64-row block: consumer c's tile (W = min(64, D - 64 c) wide) lands at 64 x 64 c floats into the block
    (the bulk reduce-add copies it as it is); attn_bwd_post finds each (row, column) there, and reads every float once."""
    found = {}
    for c in range(-(-D // 64)):
        w = min(64, D - 64 * c)
        for byte, (row, col) in _stmatrix_tile(w).items():
            if col < w:  # D = 96's second half: its fragment's columns past W are not stored (W / 8 groups)
                found[(row, 64 * c + col)] = 64 * 64 * c + byte // 4
    assert len(found) == 64 * D
    read = {(rr, d): _post_source(rr, d, D) for rr in range(64) for d in range(D)}
    assert read == found
    assert sorted(read.values()) == list(range(64 * D))


@pytest.mark.parametrize("w", [64, 32])
def test_each_matrix_row_set_is_free_of_bank_conflicts(w):
    """A matrix's 8 rows (16 bytes each, one row per addressing lane) fall on 8 different 16-byte bank groups."""
    for warp in range(4):
        for g in range(w // 8):
            for m in range(4):
                rows = [16 * warp + rr + 8 * (m // 2) for rr in range(8)]
                groups = {((row * w * 4 + 16 * ((2 * g + m % 2) ^ (row % 8))) // 16) % 8 for row in rows}
                assert len(groups) == 8, (warp, g, m)


def test_dq_stmatrix_assembles_with_the_tiles_stores_as_stmatrix():
    base = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text("ds_stmatrix+head_groups")),
                          "cuda", "sm_90a")
    r = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text("dq_stmatrix+head_groups")), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings
    for name, k in r.kernels.items():
        old = base.kernels[name]
        assert k.spill_stores == k.spill_loads == 0, name
        if name.startswith("attn_bwd_wgmma"):
            added = 12 if "d96" in name else 8  # W = 64: 8 stmatrix a thread; D = 96's 32-wide half: its own 4
            assert k.sass_opcodes.get("STSM", 0) - old.sass_opcodes.get("STSM", 0) == added, name
            assert k.sass_opcodes.get("STS", 0) < old.sass_opcodes.get("STS", 0), name
            assert k.sass_opcodes["HGMMA"] == old.sass_opcodes["HGMMA"], name
