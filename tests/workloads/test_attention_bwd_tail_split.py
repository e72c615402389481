"""The backward's tail_split variant (workloads/solutions/attention_bwd_variants/tail_split.py): the main kernel's
last wave cut into pieces. Checked here: a mirror of its decode gives every (key block, head, query block) to exactly
one CTA at the main workloads' shapes and the smoke ones (every key block cut), the cut blocks are the last of
head_groups' order and their pieces the last CTAs, each piece a contiguous part of its block's query loop (empty
parts only where a causal block is shorter than its pieces); the plan's grid is that CTA count for every backward
workload, GQA's over B * HKV; every kernel assembles without spills or wgmma serialisation; the partials are stored
before the fence and the count, and read past L1 after it. Correctness and speed: the GPU (attention_bwd.md v24)."""
from __future__ import annotations

import difflib

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.gpu.limits import DeviceLimits, check_compiled
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload, list_workloads
from ptxbench.workloads.solutions.attention_backward import fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text
from ptxbench.workloads.solutions.attention_bwd_variants.tail_split import DECODE, EPILOGUE, PIECES, RANGE

from attention_bwd_order import BN, all_units, key_block, n_iter, shape

BACKWARD = [w.id for w in list_workloads() if w.op == "mha_bwd"]


def _decode(bx: int, n_kb: int, kv_heads: int, nsm: int, pieces: int):
    """The kernel's DECODE, mirrored: (item, piece) of CTA bx."""
    items = n_kb * kv_heads
    rem = items % nsm if pieces > 1 else 0
    full = items - rem
    return (bx, -1) if bx < full else (full + (bx - full) // pieces, (bx - full) % pieces)


def test_the_mirror_is_the_variants_text():
    assert "rem = pieces > 1 ? items % nsm : 0, full = items - rem;" in DECODE[1]
    assert "const int lin = bx < full ? bx : full + (bx - full) / pieces;" in DECODE[1]
    assert "const int piece = bx < full ? -1 : (bx - full) % pieces;" in DECODE[1]
    assert "it_lo = piece < 0 ? 0 : piece * n_iter / pieces, it_hi = piece < 0 ? n_iter : (piece + 1) * n_iter / pieces;" \
        in RANGE[1]


@pytest.mark.parametrize("wid", BACKWARD)
def test_every_unit_of_work_is_taken_once(wid):
    w = get_workload(wid)
    s, qr, group, causal, kv_heads = shape(w)
    n_kb, nsm = s // BN, 132
    plan = resolve_plan(parse_solution(fast_backward(w, variant_text("tail_split")), w).plan, w, nsm, "sm_90a")
    ctas = int(plan.launches[1].grid[0])
    items = n_kb * kv_heads
    assert ctas == items + (items % nsm) * (PIECES - 1)
    taken: dict[tuple, int] = {}
    last_whole = -1
    for bx in range(ctas):
        lin, piece = _decode(bx, n_kb, kv_heads, nsm, PIECES)
        kb, bkv = key_block(lin, n_kb, kv_heads)
        iters = n_iter(kb, s, qr, group, causal)
        lo, hi = (0, iters) if piece < 0 else (piece * iters // PIECES, (piece + 1) * iters // PIECES)
        if piece < 0:
            last_whole = bx
        else:
            assert bx > last_whole  # the pieces come after every whole block
            assert hi > lo or causal or iters < PIECES  # an empty piece only where the block is shorter than its pieces
        for it in range(lo, hi):
            key = (bkv, kb, it)
            taken[key] = taken.get(key, 0) + 1
    assert set(taken) == all_units(s, qr, group, causal, kv_heads) and set(taken.values()) == {1}


def test_every_kernel_assembles_without_spills_and_every_plan_fits_the_h200():
    """tail_split's kernels; tail_whole's are the same device code (test_tail_whole_is_tail_split_with_one_piece), so
    its plans are checked against the same figures."""
    r = compile_source(fast_backward(get_workload("mha_bwd_d128"), variant_text("tail_split")), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings, [w.message for w in r.warnings]
    for name, k in r.kernels.items():
        assert k.spill_stores == k.spill_loads == 0, name
        # the last-piece flag lives in the dynamic area: a static __shared__ int costs 1 KB beside the 1024-aligned
        # dynamic area, which the 128-wide kernels' 226.75 KB do not leave (the H200 refused that plan: PLAN_ERROR)
        assert k.smem_static == 0, name
    assert r.kernels["attn_bwd_wgmma"].sass_opcodes["HGMMA"] == 40 and r.kernels["attn_bwd_wgmma_d64"].sass_opcodes["HGMMA"] == 32
    lim = DeviceLimits()
    for variant in ("tail_split", "tail_whole"):
        for wid in BACKWARD:
            w = get_workload(wid)
            plan = resolve_plan(parse_solution(fast_backward(w, variant_text(variant)), w).plan, w, lim.sm_count,
                                "sm_90a")
            assert check_compiled(plan, {k: v.smem_static for k, v in r.kernels.items()}, lim) == [], (variant, wid)


def test_tail_whole_is_tail_split_with_one_piece():
    """The control: the same device code, a grid of one CTA per key block and 1 as the piece count (so rem = 0)."""
    split, whole = variant_text("tail_split"), variant_text("tail_whole")
    assert '"i32:1", "scratch:tail_part"' in whole and '"i32:5", "scratch:tail_part"' in split
    assert 'grid = ["cdiv(S, 128) * (B * H) + cdiv(S, 128) * (B * H) % num_sms * 0"]' in whole
    body = lambda text: text[text.index("#include"):]  # noqa: E731  (the device code, past the plan)
    assert body(split) == body(whole)


def test_the_partials_go_out_before_the_count_and_come_back_past_l1():
    text = EPILOGUE[1]
    order = [text.index(x) for x in ("*reinterpret_cast<float4*>(mine + i)", "__threadfence();",
                                      "named_barrier_sync(6, 256);", "atomicAdd(&tail_count[lin - full], 1)",
                                      "if (!last_piece) return;", "__ldcg(", "store_rows16(dV, dv, 1.f, row0, D, lane);")]
    assert order == sorted(order)
    assert text.count("named_barrier_sync(6, 256);") == 2  # the count is read by all only after thread 128 wrote it
    assert "named_barrier_sync(6," not in variant_text("pre_plain+head_groups")  # barrier 6 is free there


@pytest.mark.parametrize("wid", BACKWARD)
def test_grid_1d_is_head_groups_order_on_one_dimension(wid):
    """The second control: the 2-D grid's CTA (x, y) is the 1-D grid's CTA x + n_kb * y, and its head count read from
    the grid's size is the 2-D grid's y extent."""
    w = get_workload(wid)
    sym = w.symbols
    kv_heads = int(sym["B"]) * int(sym.get("HKV", sym["H"]))
    n_kb = int(sym["S"]) // BN
    one = resolve_plan(parse_solution(fast_backward(w, variant_text("grid_1d")), w).plan, w, 132, "sm_90a")
    two = resolve_plan(parse_solution(fast_backward(w, variant_text("pre_plain+head_groups")), w).plan, w, 132, "sm_90a")
    assert tuple(two.launches[1].grid) == (n_kb, kv_heads, 1) and tuple(one.launches[1].grid) == (n_kb * kv_heads, 1, 1)
    assert one.launches[1].args == two.launches[1].args


def test_grid_1d_changes_only_the_grid():
    one, two = variant_text("grid_1d"), variant_text("pre_plain+head_groups")
    changed = [ln for ln in difflib.unified_diff(two.splitlines(), one.splitlines(), lineterm="", n=0)
               if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert len([c for c in changed if c.startswith("-")]) == 3  # the grid line and two of the decode lines
    assert "static_cast<int>(gridDim.x) / n_kb" in one and "blockIdx.y" not in one
