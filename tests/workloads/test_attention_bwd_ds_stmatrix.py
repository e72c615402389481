"""The backward's ds_stmatrix variant (workloads/solutions/attention_bwd_variants/block_ds_stmatrix.py): the 128-wide
block's dS^T tile written by stmatrix.x4. Its lines, mirrored: every packed pair lands at the byte the reference's
st.shared.b32 loop put it; it assembles in every entry point with a quarter of those stores and no spills. Its speed
is measured on the GPU (attention_bwd.md v16)."""
from __future__ import annotations

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.block_ds_stmatrix import DS_STORES
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text


def _reference_stores(c: int, warp: int) -> dict[int, tuple[int, int]]:
    """st_static's loop: byte address -> (lane, register) of each packed pair of one warp of consumer c."""
    out = {}
    for lane in range(32):
        r, col0 = 16 * warp + lane // 4, 2 * (lane % 4)
        for i in range(16):
            row, q = 64 * c + r + 8 * (i % 2), 8 * (i // 2) + col0
            out[row * 128 + (((q // 8) ^ (row % 8)) * 16) + (q % 8) * 2] = (lane, i)
    return out


def _stmatrix_stores(c: int, warp: int) -> dict[int, tuple[int, int]]:
    """ds_stmatrix's lines under stmatrix.m8n8.x4 (PTX ISA): instruction g stores registers 4 g + k as matrix k; lane l
    holds row l / 4, bytes 4 (l % 4) of each matrix and gives the address of row l % 8 of matrix l / 8."""
    def row_address(g: int, lane: int) -> int:
        row = 64 * c + 16 * warp + lane % 8 + 8 * ((lane // 8) % 2)
        return row * 128 + (((2 * g + lane // 16) ^ (row % 8)) * 16)
    out = {}
    for g in range(4):
        for k in range(4):
            for lane in range(32):
                out[row_address(g, 8 * k + lane // 4) + 4 * (lane % 4)] = (lane, 4 * g + k)
    return out


def test_the_mirror_is_the_variants_text():
    assert "const int row = 64 * c + 16 * (t / 32) + lane % 8 + 8 * ((lane / 8) % 2);" in DS_STORES[1]
    assert "stmatrix_x4(buf + row * 128 + (((2 * g + lane / 16) ^ (row % 8)) * 16), ds[4 * g], ds[4 * g + 1]" in DS_STORES[1]
    assert "const int r = 16 * (t / 32) + lane / 4;" in variant_text("ds_stmatrix")  # the reference loop's r


def test_every_pair_lands_where_the_reference_put_it():
    for c in range(2):
        for warp in range(4):
            ref, new = _reference_stores(c, warp), _stmatrix_stores(c, warp)
            assert len(ref) == len(new) == 32 * 16 and new == ref, (c, warp)


def test_ds_stmatrix_assembles_with_a_quarter_of_the_stores():
    kernels = {}
    for name in ("st_static+head_groups", "ds_stmatrix+head_groups"):
        r = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text(name)), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings, name
        kernels[name] = r.kernels
    for k, new in kernels["ds_stmatrix+head_groups"].items():
        old = kernels["st_static+head_groups"][k]
        assert new.spill_stores == new.spill_loads == 0 and new.registers == old.registers, k
        if k.startswith("attn_bwd_wgmma") and "d64" not in k:  # the 128-wide block
            assert new.sass_opcodes.get("STSM") == 4 and old.sass_opcodes["STS"] - new.sass_opcodes["STS"] == 16, k
            assert new.sass_opcodes["HGMMA"] == old.sass_opcodes["HGMMA"], k
        else:
            assert new.sass_opcodes == old.sass_opcodes, k
