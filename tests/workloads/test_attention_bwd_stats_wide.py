"""The backward's stats_wide variant (workloads/solutions/attention_bwd_variants/block_stats_wide.py): the preprocess
stores each 64-row block's L2 and Dr in a layout where a consumer thread's sixteen values are four 16-byte vectors.
Mirrored here: the layout is a permutation of each block; every lane's vectors hold exactly the pairs (8 a + 2 t, + 1)
its exponentials and dS use, in the 128-wide block (64 rows) and D = 64's (128 rows); the lanes of each 8-lane phase
of an ld.shared.v4 read four different 16-byte vectors on four different groups of banks. It assembles with half
the shared-memory loads and the same products, no spills. Speed: the GPU (attention_bwd.md v19)."""
from __future__ import annotations

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.block_stats_wide import BLOCK_64, BLOCK_128, PRE
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text


def _prow(row: int) -> int:
    """PRE's index: row 8 a + 2 t + e of its 64-row block -> 16 t + 4 ((a / 2) ^ (t / 2)) + 2 (a % 2) + e."""
    col = row % 64
    a, t4 = col // 8, (col % 8) // 2
    return row - col + 16 * t4 + 4 * ((a // 2) ^ (t4 // 2)) + 2 * (a % 2) + col % 2


def _vector(lane: int, i: int) -> int:
    """The first float of vector i a lane reads in the 128-wide block: 8 col0 + 4 (i ^ (col0 / 4)), col0 = 2 (lane % 4)."""
    col0 = 2 * (lane % 4)
    return 8 * col0 + 4 * (i ^ (col0 // 4))


def test_the_mirror_is_the_variants_text():
    assert "const int prow = row - col + 16 * t4 + 4 * ((a / 2) ^ (t4 / 2)) + 2 * (a % 2) + col % 2;" in PRE[1]
    assert "lds128(sL2 + 8 * col0 + 4 * (i ^ (col0 / 4)))" in BLOCK_128[0][1]
    assert "lds128(sL2 + 64 * (i / 4) + 8 * col0 + 4 * ((i % 4) ^ (col0 / 4)))" in BLOCK_64[0][1]


def test_the_layout_permutes_each_64_row_block():
    for base in (0, 64, 4096 - 64):
        assert sorted(_prow(base + c) for c in range(64)) == list(range(base, base + 64))


def test_every_lane_reads_its_pairs_in_both_blocks():
    where = {_prow(row): row for row in range(128)}  # stored position -> the row it holds
    for lane in range(32):
        col0 = 2 * (lane % 4)
        for i in range(4):  # the 128-wide block: vector i holds a = 2 i (x, y) and 2 i + 1 (z, w)
            got = [where[_vector(lane, i) + k] for k in range(4)]
            assert got == [8 * (2 * i) + col0, 8 * (2 * i) + col0 + 1, 8 * (2 * i + 1) + col0, 8 * (2 * i + 1) + col0 + 1]
        for i in range(8):  # D = 64: 128 rows, vector i % 4 of 64-row block i / 4 holds a = 2 i, 2 i + 1
            start = 64 * (i // 4) + 8 * col0 + 4 * ((i % 4) ^ (col0 // 4))
            assert [where[start + k] for k in range(4)] == [16 * i + col0, 16 * i + col0 + 1, 16 * i + 8 + col0,
                                                           16 * i + 8 + col0 + 1]


def test_each_phase_of_8_lanes_hits_4_vectors_on_4_bank_groups():
    for i in range(4):
        for phase in range(4):
            starts = {_vector(lane, i) for lane in range(8 * phase, 8 * phase + 8)}
            assert len(starts) == 4  # the quad positions; lanes with one position share a vector (a broadcast)
            assert len({(4 * s // 16) % 8 for s in starts}) == 4  # 16-byte bank groups: 8 per 128 bytes


def test_stats_wide_assembles_with_half_the_shared_loads():
    kernels = {}
    for name in ("ds_stmatrix+head_groups", "stats_wide+head_groups"):
        r = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text(name)), "cuda", "sm_90a")
        assert r.status == "ok" and not r.warnings, name
        kernels[name] = r.kernels
    for k, new in kernels["stats_wide+head_groups"].items():
        old = kernels["ds_stmatrix+head_groups"][k]
        assert new.spill_stores == new.spill_loads == 0 and new.registers == old.registers, k
        assert new.sass_opcodes.get("HGMMA") == old.sass_opcodes.get("HGMMA"), k
        if k.startswith("attn_bwd_wgmma"):
            assert 2 * new.sass_opcodes["LDS"] == old.sass_opcodes["LDS"], k
