"""The backward's pre_wide variant (workloads/solutions/attention_bwd_variants/pre_wide.py): the preprocess with 16
lanes a row, 16-byte accesses and four rows a warp. Mirrored here: with its grid every row is taken by exactly one
half-warp, every 8-column chunk of it (D = 64 / 96 / 128) by exactly one lane, so the accumulator row is zeroed whole
and Dr / L2 are written once, at stats_wide's position, including a last block past the rows; the 16-lane reduction
stays inside its half-warp. It assembles with 16-byte loads and stores. Speed: the GPU (attention_bwd.md v20)."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.pre_wide import PRE_GRID, PRE_KERNEL
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text

from sass_order import sass_ops


def test_the_mirror_is_the_variants_text():
    assert "const int first = 4 * (blockIdx.x * 8 + threadIdx.x / 32) + lane / 16;" in PRE_KERNEL
    assert "const int row = first + 2 * i;" in PRE_KERNEL and "8 * ch < D" in PRE_KERNEL
    assert "for (int m = 8; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);" in PRE_KERNEL
    assert 'grid = ["cdiv(B * H * S, 32)"]' in PRE_GRID[1]


@pytest.mark.parametrize("rows", [64, 100, 4096])
@pytest.mark.parametrize("d", [64, 96, 128])
def test_every_row_and_chunk_once(rows, d):
    taken: dict[tuple[int, int], int] = {}
    writers: dict[int, int] = {}
    for block in range(-(-rows // 32)):
        for tid in range(256):
            lane, ch = tid % 32, tid % 32 % 16
            first = 4 * (block * 8 + tid // 32) + lane // 16
            for i in range(2):
                row = first + 2 * i
                if row < rows and 8 * ch < d:
                    taken[(row, ch)] = taken.get((row, ch), 0) + 1
                if ch == 0 and row < rows:
                    writers[row] = writers.get(row, 0) + 1
    assert set(taken.values()) == {1} and set(taken) == {(r, c) for r in range(rows) for c in range(d // 8)}
    assert writers == {r: 1 for r in range(rows)}
    # the reduction's partners (xor 8, 4, 2, 1) stay in the lane's half-warp: the row's 16 lanes
    assert all((lane ^ m) // 16 == lane // 16 for lane in range(32) for m in (8, 4, 2, 1))


def test_pre_wide_assembles_with_16_byte_accesses():
    r = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text("pre_wide+head_groups")), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings
    pre = r.kernels["attn_bwd_pre"]
    assert pre.spill_stores == 0
    assert pre.sass_opcodes.get("LDG") == 6 and pre.sass_opcodes.get("STG") == 8  # O / dO x 2 rows, LSE x 2; zeros, Dr, L2
    ops = sass_ops(fast_backward(get_workload("mha_bwd_d128"), variant_text("pre_wide+head_groups")), "attn_bwd_pre")
    assert sum(o.startswith("LDG.E.128") for o in ops) == 4 and sum(o.startswith("STG.E.128") for o in ops) == 4, \
        [o for o in ops if o.startswith(("LDG", "STG"))]


def test_pre_plain_is_pre_wide_writing_row_by_row():
    """pre_plain (on ds_stmatrix, whose main kernel reads L2 / Dr in the rows' order): pre_wide's kernel with the
    stats_wide index replaced by the row itself, its grid, and the main kernels ds_stmatrix's instruction for
    instruction."""
    text = variant_text("pre_plain+head_groups")
    pre = text[text.index("// attn_bwd_pre (pre_plain)"):text.index("// attn_bwd_post")]
    assert "const int prow = row;" in pre and "t4 / 2" not in pre and 'grid = ["cdiv(B * H * S, 32)"]' in text
    r = compile_source(fast_backward(get_workload("mha_bwd_d128"), text), "cuda", "sm_90a")
    base = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text("ds_stmatrix+head_groups")), "cuda",
                          "sm_90a")
    assert r.status == "ok" and not r.warnings
    for name, k in r.kernels.items():
        if name.startswith("attn_bwd_wgmma"):
            assert k.sass_opcodes == base.kernels[name].sass_opcodes, name
    pre = r.kernels["attn_bwd_pre"]
    assert pre.sass_opcodes.get("LDG") == 6 and pre.sass_opcodes.get("STG") == 8 and pre.spill_stores == 0
