"""The Hopper attention backward (workloads/solutions/attention_bwd_wgmma.cu, per workload by `fast_backward`):
it covers every backward workload of the registry, its plans resolve, it compiles for sm_90a to HGMMA + TMA
(tensor and bulk copies) with no spills and no ptxas warnings, its REFERENCE_VARIANT is what builtin/reference
submits, and (on a GPU) that passes with a measured floor against cuDNN. Figures: bench/results/attention_bwd.md."""
from __future__ import annotations

from collections import Counter

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.tools.solution.plan import Solution
from ptxbench.workloads.registry import get_workload, list_workloads
from ptxbench.workloads.solutions.attention_backward import (REFERENCE_VARIANT, backward_entry_point, covers, fast_backward,
                                                              reference_backward)
from ptxbench.workloads.solutions.attention_bwd_variants import VARIANTS, variant_text

from bwd_variant_checks import D64

from sass_order import count, first, sass_ops

BACKWARD = [w.id for w in list_workloads() if w.op == "mha_bwd"]
# Floors vs cuDNN for the reference (reference_backward), about 0.9x of what the H200 measured
# (bench/results/attention_bwd.md, v13, st_static+head_groups: d128 0.975x, causal 0.984x, d96 1.015x / 1.032x,
# GQA 1.012x; its D = 64 kernels are st_ahead's: 1.066x / 1.092x); none on the launch-bound smoke shapes.
MIN_SPEEDUP = {"mha_bwd_d128": 0.88, "mha_bwd_d128_causal": 0.89, "mha_bwd_d64": 0.96, "mha_bwd_d64_causal": 0.98,
               "mha_bwd_d96": 0.91, "mha_bwd_d96_causal": 0.93, "mha_bwd_d128_gqa_h32_kv8": 0.91}
# HGMMA per main kernel: S^T and dP^T (D / 16 k16 steps each, D padded to 128 for 96), dV and dK (4 each), dQ
# (8 k16 steps over 128 keys for the 128-wide kernels, 4 over a consumer's own keys for D = 64)
HGMMA = {128: 8 + 8 + 4 + 4 + 8, 64: 4 + 4 + 4 + 4 + 4}


def test_it_covers_every_backward_workload():
    assert BACKWARD and all(covers(get_workload(w)) is None for w in BACKWARD), [covers(get_workload(w)) for w in BACKWARD]


@pytest.mark.parametrize("wid", BACKWARD)
def test_the_plan_resolves_to_three_launches(wid):
    w = get_workload(wid)
    sol = parse_solution(fast_backward(w), w)
    assert isinstance(sol, Solution), sol
    plan = resolve_plan(sol.plan, w, 132, "sm_90a")
    kernels = [launch.kernel for launch in plan.launches]
    d, gqa = int(w.symbols["D"]), "HKV" in w.symbols
    assert kernels == ["attn_bwd_pre", backward_entry_point(d, w.causal, gqa), "attn_bwd_post"]
    heads = int(w.symbols["B"]) * int(w.symbols["HKV" if gqa else "H"])
    assert tuple(plan.launches[1].grid)[:2] == (heads, int(w.symbols["S"]) // 128)


@pytest.fixture(scope="module")
def compiled():
    src = fast_backward(get_workload("mha_bwd_d128"))  # one file holds every entry point
    return compile_source(src, "cuda", "sm_90a")


def test_every_entry_point_assembles_to_wgmma_and_tma_without_spills(compiled):
    assert compiled.status == "ok", compiled.errors
    assert not compiled.warnings, compiled.warnings
    entries = {backward_entry_point(d, c, g) for d in (64, 128) for c in (False, True) for g in (False, True)
               if not (c and g)}
    assert entries <= set(compiled.kernels)
    for name in entries:
        k = compiled.kernels[name]
        assert k.spill_stores == 0 and k.spill_loads == 0, (name, k.spill_stores, k.spill_loads)
        assert k.barriers <= 2, (name, k.barriers)  # __syncthreads and the consumers' named barrier, nothing reserved
        ops = k.sass_opcodes
        assert ops.get("HGMMA") == HGMMA[64 if "_d64" in name else 128], (name, ops.get("HGMMA"))
        assert ops.get("UTMALDG", 0) > 0 and ops.get("UBLKCP", 0) > 0, name  # Q/dO/K/V tiles, L2/Dr rows
        assert ops.get("REDG", 0) > 0, name  # dQ added with reductions, no read-modify-write
    assert compiled.targets["wgmma"].in_sass and compiled.targets["tma"].in_sass


# what each variant's 128-wide kernel must show: dQ by one bulk reduction, or still by vector reductions
# decoupled: dQ in the loop and after it
VARIANT_SASS = {"bulk_dq": {"UBLKRED": 1}, "bulk_dq_s3": {"UBLKRED": 1}, "decoupled": {"REDG": 32, "HGMMA": 40},
                "bulk_dq_d64": {"UBLKRED": 1, "HGMMA": 32}, "bulk_dq_d64+head_major": {"UBLKRED": 1, "HGMMA": 32},
                "bulk_dq_d64+head_groups": {"UBLKRED": 1, "HGMMA": 32}, "dq_tiles": {"UBLKRED": 1, "HGMMA": 32},
                "dq_tiles+head_groups": {"UBLKRED": 1, "HGMMA": 32},
                # own_keys: dQ as one m64n128 product over the consumer's own 16-key steps (4 instead of 8 m64n64)
                "own_keys": {"UBLKRED": 1, "HGMMA": 28},
                "own_keys_s3": {"UBLKRED": 2, "HGMMA": 28},  # one reduction per column half
                # own_keys_wide: dK and dV in 16-byte stores, 2 tensors x 2 rows x 4 groups of four 8-column groups,
                # each after 3 shuffle rounds
                "own_keys_wide": {"UBLKRED": 1, "HGMMA": 28, "STG": 16, "SHFL": 48},
                "dq_tiles_wide": {"UBLKRED": 1, "HGMMA": 32, "STG": 16, "SHFL": 48},
                # d96_ksteps: the D = 128 block (32 HGMMA) and the D = 96 one (6 + 6 + 4 + 4 + 8), one reduction each
                "d96_ksteps": {"UBLKRED": 2, "HGMMA": 60},
                # tiles_stack: d96_ksteps' two builds of the block, the wide epilogue (D = 64: q128_d64's, below)
                "tiles_stack": {"UBLKRED": 2, "HGMMA": 60, "STG": 16, "SHFL": 48},
                "q128_d64": {"UBLKRED": 1, "HGMMA": 32},  # the 128-wide kernels are dq_tiles' (D = 64 below)
                # tiles_d96: tiles_stack with D = 96's block in entry points of its own: the 128-wide kernels are
                # dq_tiles_wide's (D = 96's below)
                "tiles_d96": {"UBLKRED": 1, "HGMMA": 32, "STG": 16, "SHFL": 48},
                "tiles_d96+head_groups": {"UBLKRED": 1, "HGMMA": 32, "STG": 16, "SHFL": 48},
                # st_ahead: tiles_d96's block with the next block's S^T issued in it, plus the first block's before
                # the loop (8 more HGMMA)
                "st_ahead": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 48},
                "st_ahead+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 48},
                # dv_early: st_ahead's products in another order; dv_uniform (the reference): one more SHFL (the
                # consumer index's broadcast) and far fewer register-to-uniform moves
                "dv_early": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 48},
                "dv_uniform": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 49},
                "dv_uniform+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 49},
                # dq_static: dv_uniform with the dQ tile's stores straight-line (no per-store branch)
                "dq_static": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 49},
                # st_uniform / st_static: st_ahead's order with the uniform index, then dq_static's stores
                "st_uniform": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 49},
                "st_static": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 49},
                "st_static+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STG": 16, "SHFL": 49},
                # ds_stmatrix: the dS^T tile by 4 stmatrix.x4 (the dQ tile's 16 STS stay)
                "ds_stmatrix+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STSM": 4, "STS": 16},
                # pre_plain: ds_stmatrix with pre_wide's preprocess writing L2 / Dr row by row (main kernel ds_stmatrix's)
                "pre_plain+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STSM": 4, "STS": 16},
                # skip_plain: the non-causal kernel is pre_plain's (the causal ones: test_attention_bwd_causal_skip.py)
                "skip_plain+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STSM": 4, "STS": 16},
                # late_d96: pre_plain with dq_late's and causal_skip's blocks at D = 96 (the D = 128 kernel is
                # pre_plain's)
                "late_d96+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STSM": 4, "STS": 16, "MUFU": 37},
                # dq_writer: late_d96 with the 128-wide block's dQ tiles reduced by a writer warp of the producer
                # warpgroup (its reductions unrolled there; tests/workloads/test_attention_bwd_dq_writer.py)
                "dq_writer+head_groups": {"HGMMA": 40, "STSM": 4, "STS": 16},
                # writer_d96: dq_writer with the writer in the D = 96 kernels too (the D = 128 kernel
                # is dq_writer's; tests/workloads/test_attention_bwd_writer_d96.py)
                "writer_d96+head_groups": {"HGMMA": 40, "STSM": 4, "STS": 16},
                # pair_d64: writer_d96 with one writer warp per consumer at D = 64 (the 128-wide kernels writer_d96's;
                # tests/workloads/test_attention_bwd_pair_d64.py)
                "pair_d64+head_groups": {"HGMMA": 40, "STSM": 4, "STS": 16},
                # pair_d64_r40 (the reference): pair_d64 with the D = 64 writers' warpgroup at 40 registers
                # (tests/workloads/test_attention_bwd_regs_d64.py)
                "pair_d64_r40+head_groups": {"HGMMA": 40, "STSM": 4, "STS": 16},
                # stats_wide: ds_stmatrix with L2 / Dr in 8 ld.shared.v4 instead of 16 ld.shared.v2
                "stats_wide+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STSM": 4, "STS": 16, "LDS": 8},
                # pre_wide: stats_wide with a new preprocess (the main kernel is stats_wide's)
                "pre_wide+head_groups": {"UBLKRED": 1, "HGMMA": 40, "STSM": 4, "STS": 16, "LDS": 8},
                # dq_late: pre_wide with the last block's dQ tile sent after the loop (a second reduction, a fourth
                # barrier); the fences stay 3: one left in the loop, one after it
                "dq_late+head_groups": {"UBLKRED": 2, "HGMMA": 40, "STSM": 4, "STS": 16, "BAR": 4, "FENCE": 3},
                # causal_skip: the non-causal kernel is dq_late's (the causal ones: test_attention_bwd_causal_skip.py)
                "causal_skip+head_groups": {"UBLKRED": 2, "HGMMA": 40, "STSM": 4, "STS": 16, "BAR": 4, "FENCE": 3}}


# the variants whose D = 64 kernels ptxas 13.5 compiles with a few spilled bytes, and which of them
D64_SPILLS = {"pair_d64": D64, "pair_d64_r40": ("attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_gqa")}


@pytest.mark.parametrize("name", sorted(VARIANT_SASS))
def test_the_bench_variants_apply_to_the_reference_and_assemble(name):
    text = variant_text(name)  # every edit finds its text in the reference exactly once
    for wid in BACKWARD:  # the reference's plan edits apply to every variant
        assert fast_backward(get_workload(wid), text) is not None
    r = compile_source(fast_backward(get_workload("mha_bwd_d128"), text), "cuda", "sm_90a")
    # pair_d64's D = 64 kernels spill a few bytes beside their writers' 24 registers (bounded in its own test)
    spilling = D64_SPILLS.get(name.partition("+")[0], ())
    assert r.status == "ok" and all(any(f"'{k}'" in w.message for k in spilling) for w in r.warnings), r.warnings
    for kname, k in r.kernels.items():
        assert kname in spilling or k.spill_stores == k.spill_loads == 0, kname
    wide = r.kernels["attn_bwd_wgmma"].sass_opcodes
    assert {op: wide.get(op) for op in VARIANT_SASS[name]} == VARIANT_SASS[name], wide
    if "UBLKRED" in VARIANT_SASS[name]:
        assert "REDG" not in wide  # dQ by one bulk reduction per block, no vector reductions left
    # and at D = 64: one bulk reduction per consumer, no float2 atomics
    if name.startswith(("bulk_dq_d64", "dq_tiles", "own_keys", "q128_d64", "tiles_", "st_ahead", "dv_")):
        narrow = compile_source(fast_backward(get_workload("mha_bwd_d64"), text), "cuda", "sm_90a").kernels
        assert narrow["attn_bwd_wgmma_d64"].sass_opcodes.get("UBLKRED") == 1
        assert "REDG" not in narrow["attn_bwd_wgmma_d64"].sass_opcodes
        # q128_d64: 128 query rows a block: S^T, dP^T 4 m64n128 each, dV, dK 8 m64n64 each, dQ 8 (all keys)
        wide_q = name.startswith(("q128_d64", "tiles_", "st_ahead", "dv_"))
        assert narrow["attn_bwd_wgmma_d64"].sass_opcodes.get("HGMMA") == (32 if wide_q else 20)


def _exponentials_before_the_dp_wait(name: str) -> tuple[int, int]:
    """(MUFU.EX2 between the start of the block's dP^T products and the first WARPGROUP.DEPBAR after them, all
    MUFU.EX2 up to the next HGMMA that reads registers) in the D = 128 kernel's consumer loop."""
    ops = sass_ops(fast_backward(get_workload("mha_bwd_d128"), variant_text(name)), "attn_bwd_wgmma")
    products = [i for i, o in enumerate(ops) if o.startswith("HGMMA.64x64x16")]
    # the block's dP^T: the second run of 64x64 products (the first is S^T before the loop)
    start = next(i for i in products if i > products[0] and not ops[i - 1].startswith("HGMMA") and
                 count(ops, "WARPGROUP.DEPBAR", products[0], i))
    wait, rs = first(ops, "WARPGROUP.DEPBAR", start), first(ops, "HGMMA.64x128x16", start)
    return count(ops, "MUFU.EX2", start, wait), count(ops, "MUFU.EX2", start, max(wait, rs))


@pytest.mark.parametrize("kernel", ["attn_bwd_wgmma_d64", "attn_bwd_wgmma_d64_causal", "attn_bwd_wgmma_d64_gqa"])
def test_the_d64_kernels_before_their_writers_are_st_aheads(kernel):
    """The warp-uniform consumer index ran 3-4% slower at D = 64 on the H200 (attention_bwd.md v11), so it was applied
    only in the 128-wide kernels: until pair_d64 gave them writer warps, every reference's D = 64 kernels were the
    ones measured at 1.066x / 1.092x, instruction for instruction (writer_d96's; the reference's differ from them by
    pair_d64's writers and its 40 / 232 split: test_attention_bwd_pair_d64.py, test_attention_bwd_regs_d64.py)."""
    wl = get_workload("mha_bwd_d64")
    assert sass_ops(fast_backward(wl, variant_text("writer_d96+head_groups")), kernel) == \
        sass_ops(fast_backward(wl, variant_text("st_ahead+head_groups")), kernel)
    assert "const int c = HD == 128 ? __shfl_sync(0xffffffffu, wg - 1, 0) : wg - 1;" in variant_text(REFERENCE_VARIANT)


def test_dv_early_keeps_the_exponentials_under_dp():
    """ptxas 13.5 sinks st_ahead's exponentials below dP^T's wait (the PTX has them before it); in dv_early the dV
    product that reads them is issued before that wait, so all 32 stay ahead of it."""
    under, total = _exponentials_before_the_dp_wait("dv_early+head_groups")
    assert under == total == 32, (under, total)
    under_ref, total_ref = _exponentials_before_the_dp_wait("st_ahead+head_groups")
    assert total_ref == 32 and under_ref < 32, (under_ref, total_ref)  # the premise, as measured on the CPU


def test_tiles_d96_runs_d96_through_entry_points_of_its_own():
    """D = 96's S^T and dP^T skip the two k16 steps of TMA's zero fill (6 + 6 + 4 + 4 + 8 HGMMA) in entry points the
    D = 96 plans name; the D = 128 ones keep the full block, one build each (no per-block branch)."""
    text = variant_text("tiles_d96+head_groups")
    for wid in BACKWARD:
        w = get_workload(wid)
        kernel = resolve_plan(parse_solution(fast_backward(w, text), w).plan, w, 132, "sm_90a").launches[1].kernel
        d, gqa = int(w.symbols["D"]), "HKV" in w.symbols
        assert kernel == backward_entry_point(d, w.causal, gqa, text)
        assert kernel.startswith("attn_bwd_wgmma_d96") == (d == 96), (wid, kernel)
    assert backward_entry_point(96, True, False, variant_text("dq_tiles")) == "attn_bwd_wgmma_causal"
    kernels = compile_source(fast_backward(get_workload("mha_bwd_d96"), text), "cuda", "sm_90a").kernels
    for name in ("attn_bwd_wgmma_d96", "attn_bwd_wgmma_d96_causal", "attn_bwd_wgmma_d96_gqa"):
        assert kernels[name].sass_opcodes.get("HGMMA") == 6 + 6 + 4 + 4 + 8, name
        assert kernels[name].spill_stores == 0 and kernels[name].spill_loads == 0, name
    for name in ("attn_bwd_wgmma", "attn_bwd_wgmma_causal", "attn_bwd_wgmma_gqa"):
        assert kernels[name].sass_opcodes.get("HGMMA") == 32, name


@pytest.mark.parametrize("wid", BACKWARD)
def test_head_major_launches_the_key_blocks_of_a_head_side_by_side(wid):
    """The same kernel and shared memory as the reference, its grid [key blocks, heads] (GQA: KV heads)."""
    w = get_workload(wid)
    ref, hm, hg = (resolve_plan(parse_solution(fast_backward(w, variant_text(n)), w).plan, w, 132, "sm_90a").launches[1]
                   for n in ("bulk_dq_d64", "bulk_dq_d64+head_major", "bulk_dq_d64+head_groups"))
    assert (hm.kernel, hm.smem, hm.block) == (ref.kernel, ref.smem, ref.block) and hg == hm
    assert tuple(hm.grid)[:2] == tuple(ref.grid)[1::-1] and tuple(hm.grid)[0] == int(w.symbols["S"]) // 128


@pytest.mark.parametrize("n_kb,heads", [(32, 192), (2, 2), (32, 32), (4, 6), (3, 1)])
def test_head_groups_order_visits_every_block_once_longest_first_within_each_group(n_kb, heads):
    """head_groups' block order (its kernel's index lines, mirrored): a bijection from the linear block id onto
    (key block, head); within each group of HEAD_GROUP heads, key block 0 (causal: the longest) of every head first."""
    group = 4
    seen = []
    for lin in range(n_kb * heads):
        grp, in_grp = lin // (group * n_kb), lin % (group * n_kb)
        g_heads = min(group, heads - grp * group)
        seen.append((in_grp // g_heads, grp * group + in_grp % g_heads))
    assert sorted(seen) == [(kb, h) for kb in range(n_kb) for h in range(heads)]
    for g0 in range(0, heads, group):
        order = [kb for kb, h in seen if g0 <= h < g0 + group]
        assert order == sorted(order)  # longest (lowest key block) first inside the group
    text = variant_text(REFERENCE_VARIANT)
    assert "const int kb = in_grp / g_heads;" in text and "const int bkv = grp * HEAD_GROUP + in_grp % g_heads;" in text


def test_every_variant_is_tested():
    assert sorted(VARIANTS) == sorted({n.partition("+")[0] for n in VARIANT_SASS})  # each in some launch order
    assert REFERENCE_VARIANT in VARIANT_SASS


def test_builtin_reference_submits_it():
    from ptxbench.agent.models.builtin import reference_source

    for wid in BACKWARD:
        assert reference_source(wid) == reference_backward(get_workload(wid))


@pytest.mark.gpu
@pytest.mark.parametrize("wid", sorted(BACKWARD, key=lambda w: not w.startswith("smoke_")))
def test_passes_and_is_fast_on_the_gpu(wid):
    from gpu_helpers import shared_evaluator

    r = shared_evaluator().evaluate(wid, reference_backward(get_workload(wid)),
                                    EvalOptions(timeout_s=120, trials=1, profile_on_pass=False))
    t = r.timing
    print("RESULT", wid, r.status, r.message, t and (t.candidate.median_ms, t.speedup, t.speedup_ci))
    assert r.status == "PASSED", (r.message, r.runtime_error, r.plan_errors)
    # the backward declares heavy-tailed inputs: the last checked call had them (runner.declared_dists_check)
    assert [s.dist for s in r.correctness][-1] == "spiky" and {s.tensor for s in r.correctness if s.dist == "spiky"} \
        == {"dQ", "dK", "dV"}
    if wid in MIN_SPEEDUP:
        assert t and t.speedup >= MIN_SPEEDUP[wid], (t and t.speedup, r.message)


@pytest.mark.parametrize("name", ["decoupled+head_major", "checked-in+head_major", "decoupled+head_groups",
                                  "checked-in+head_groups", "bulk_dq+head_groups"])
def test_any_build_can_be_launched_in_either_head_order(name):
    """`X+order`: every build of the template in head_major's or head_groups' launch order (the template's `order`
    lever); the same kernel as X with the order's grid, on every backward workload."""
    text = variant_text(name)
    order = name.partition("+")[2]
    kb_line = {"head_major": "const int kb = blockIdx.x;", "head_groups": "const int kb = in_grp / g_heads;"}[order]
    assert text.startswith(f"// + {order}") and kb_line in text and "const int kb = blockIdx.y;" not in text
    for wid in BACKWARD:
        w = get_workload(wid)
        launch = resolve_plan(parse_solution(fast_backward(w, text), w).plan, w, 132, "sm_90a").launches[1]
        assert tuple(launch.grid)[0] == int(w.symbols["S"]) // 128
    r = compile_source(fast_backward(get_workload("mha_bwd_d128"), text), "cuda", "sm_90a")
    assert r.status == "ok" and not r.warnings and all(k.spill_stores == 0 for k in r.kernels.values())


def test_an_unknown_launch_order_is_named():
    with pytest.raises(KeyError, match="no launch order"):
        variant_text("decoupled+spiral")


@pytest.mark.parametrize("D", [64, 96, 128])
def test_dq_tiles_layout_is_read_back_by_the_postprocess(D):
    """dq_tiles' dQacc layout (its kernels' index lines, mirrored): what each consumer's bulk reduction writes for
    (query row, column) is where attn_bwd_post reads that element, every element of a 64-row block has its own
    float inside the block's 64 x D, and a warp's 8 rows of one 32-byte group fall on 8 different groups of banks."""
    written = {}
    for c in range(2 if D > 64 else 1):  # D = 64: both consumers add into one tile, the same addresses
        W = min(64, D - 64 * c) if D > 64 else 64
        base = 64 * 64 * c if D > 64 else 0
        sw = W // 8 - 1
        for row in range(64):
            for g in range(8):
                for k in range(8):  # col0 + j % 2 over the group's 8 floats
                    if 8 * g < W:
                        written[(row, (64 * c if D > 64 else 0) + 8 * g + k)] = base + row * W + 8 * (g ^ (row & sw)) + k
    assert sorted(written) == [(r, d) for r in range(64) for d in range(D)]
    assert sorted(written.values()) == list(range(64 * D))
    for row in range(64):
        for d in range(0, D, 4):  # the postprocess: four consecutive elements, one float4
            c, dd = d // 64, d % 64
            W = min(64, D - 64 * c)
            src = 64 * 64 * c + row * W + 8 * ((dd // 8) ^ (row & (W // 8 - 1))) + dd % 8
            assert [src + k for k in range(4)] == [written[(row, d + k)] for k in range(4)] and src % 4 == 0
    # bank groups of the tile stores (32 bytes = 8 of the 32 banks, 4 groups): a warp stores rows r..r+7 of one
    # 32-byte group, 256 bytes, 2 wavefronts at best: each bank group at most twice (unswizzled: all 8 on one)
    for W in {min(64, D - 64 * c) if D > 64 else 64 for c in range(2)}:
        for g in range(W // 8):
            per_group = Counter((row * W + 8 * (g ^ (row & (W // 8 - 1)))) * 4 // 32 % 4 for row in range(8))
            assert max(per_group.values()) == 2
    text = variant_text("dq_tiles")
    assert "8 * (g ^ (row & sw))" in text and "8 * ((dd / 8) ^ (rr & (W / 8 - 1)))" in text


def test_dq_static_stores_each_value_where_dq_tiles_did():
    """dq_static's store_dq_tile (its lines, mirrored): the thread's row base plus a constant XOR the row's swizzle is
    dq_tiles' address for every thread, element and tile width (64; 32 for D = 96's second consumer)."""
    text = variant_text("dq_static")
    for line in ("float* base = tile + r * W + col0;", "const int x = 8 * (r & (W / 8 - 1));",
                 "if (8 * g < W) sts64(base + h * 8 * W + ((8 * g) ^ x), dq[j], dq[j + 1]);",
                 "const int W = KD == 128 || c == 0 ? 64 : 32;"):
        assert line in text, line
    for W in (64, 32):
        for t in range(128):
            lane = t % 32
            r, col0 = 16 * (t // 32) + lane // 4, 2 * (lane % 4)
            for j in range(0, 32, 2):
                g, h = j // 4, (j // 2) % 2
                if 8 * g < W:
                    row = r + 8 * h
                    assert r * W + col0 + h * 8 * W + ((8 * g) ^ (8 * (r & (W // 8 - 1)))) == \
                        row * W + 8 * (g ^ (row & (W // 8 - 1))) + col0


def test_dq_statics_tile_stores_have_no_branch():
    """The 128-wide kernel's 16 dQ tile stores (STS.64) run straight: no branch between the first and the last, and
    fewer instructions than dv_uniform's kernel (each of whose stores sat behind its own branch)."""
    ops = sass_ops(fast_backward(get_workload("mha_bwd_d128"), variant_text("dq_static+head_groups")), "attn_bwd_wgmma")
    sts = [i for i, o in enumerate(ops) if o.startswith("STS.64")]
    assert len(sts) == 16 and count(ops, "BRA", sts[0], sts[-1]) == 0
    ref = sass_ops(fast_backward(get_workload("mha_bwd_d128"), variant_text("dv_uniform+head_groups")), "attn_bwd_wgmma")
    ref_sts = [i for i, o in enumerate(ref) if o.startswith("STS.64")]
    assert count(ref, "BRA", ref_sts[0], ref_sts[-1]) >= 7 and len(ops) < len(ref) - 100  # 8 groups, 7 branches between


def test_the_16_byte_epilogue_puts_every_value_of_a_row_in_its_column_once():
    """own_keys_wide's store_rows16 (its kernel's lines, mirrored): for every lane of a warp, 4 groups at a time, the
    shuffle rounds and the final picks give lane q the 8 columns of group g0 + q of its row, in column order."""
    text = variant_text("own_keys_wide")
    for line in ("got[0] = pick4(mine[0], mine[1], mine[2], mine[3], q);",
                 "got[i] = __shfl_sync(0xffffffffu, pick4(mine[0], mine[1], mine[2], mine[3], (q - i) & 3),",
                 "(lane & ~3) | ((q + i) & 3));",
                 "mine[k] = pack_bf16(acc[4 * (g0 + k) + 2 * h] * mul, acc[4 * (g0 + k) + 2 * h + 1] * mul);",
                 "const uint4 v = make_uint4(pick4(got[0], got[1], got[2], got[3], (0 - q) & 3),",
                 "const int d = 8 * (g0 + q);"):
        assert line in text, line
    for n in (64, 32):  # HD = 128 and 64: accumulators per thread
        written = {}
        for h in range(2):
            for g0 in range(0, n // 4, 4):
                # element j of lane l: row l / 4 + 8 ((j / 2) % 2), column 8 (j / 4) + 2 (l % 4) + j % 2, as pairs
                mine = {l: [tuple((l // 4 + 8 * h, 8 * (g0 + k) + 2 * (l % 4) + e) for e in (0, 1)) for k in range(4)]
                        for l in range(32)}
                for lane in range(32):
                    q = lane % 4
                    got = [mine[lane][q]] + [mine[(lane & ~3) | ((q + i) & 3)][(((q + i) & 3) - i) & 3]
                                             for i in (1, 2, 3)]
                    v = [got[(s - q) & 3] for s in range(4)]
                    d = 8 * (g0 + q)
                    for s, pair in enumerate(v):
                        for e, (row, col) in enumerate(pair):
                            assert (row, d + 2 * s + e) not in written
                            written[(row, d + 2 * s + e)] = (row, col)
        assert all(k == v for k, v in written.items()) and len(written) == 16 * (2 * n)
