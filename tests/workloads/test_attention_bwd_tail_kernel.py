"""The backward's tail_kernel variant (workloads/solutions/attention_bwd_variants/tail_kernel.py): tail_split's pieces
in a launch of their own, on the reference (late_d96). Checked here: mirrors of both launches' decodes give every (KV head, key block, query
iteration) to exactly one CTA at every backward workload (the smoke ones cut every block, and the main launch's one
CTA then returns); each workload's plan launches its entry point and that entry point's tail twin, GQA's over
B * HKV, and its text keeps only those two of the 18 main entry points (all 18 passed the compiler's 8 s CPU limit on
the H200's host); every kernel assembles without spills or static shared memory and every plan fits the H200; and the main
launch's block loop is the reference's schedule (SASS lines in place), which tail_split's was not (attention_bwd.md, "v24
controls, second call"). Correctness and speed: the GPU."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.gpu.limits import DeviceLimits, check_compiled
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload, list_workloads
from ptxbench.workloads.solutions.attention_backward import backward_entry_point, fast_backward
from ptxbench.workloads.solutions.attention_bwd_variants.registry import variant_text
from ptxbench.workloads.solutions.attention_bwd_variants.tail_kernel import DECODE, PIECES

from attention_bwd_order import BN, all_units, key_block, n_iter, shape
from sass_order import loop_schedule

BACKWARD = [w.id for w in list_workloads() if w.op == "mha_bwd"]
NSM = 132


def _decode(tail: bool, bx: int, items: int, nsm: int, pieces: int):
    """The kernel's DECODE, mirrored: (item, piece) of CTA bx of a launch, or None where the CTA returns at once."""
    rem = items % nsm
    full = items - rem
    if (bx >= rem * pieces) if tail else (bx >= full):
        return None
    return (full + bx // pieces, bx % pieces) if tail else (bx, -1)


def test_the_mirror_is_the_variants_text():
    assert "rem = items % nsm, full = items - rem;" in DECODE[1]
    assert "if (TAIL ? bx >= rem * pieces : bx >= full) return;" in DECODE[1]
    assert "const int lin = TAIL ? full + bx / pieces : bx;" in DECODE[1]
    assert "const int piece = TAIL ? bx % pieces : -1;" in DECODE[1]


@pytest.mark.parametrize("wid", BACKWARD)
def test_every_unit_of_work_is_taken_once_over_both_launches(wid):
    w = get_workload(wid)
    s, qr, group, causal, kv_heads = shape(w)
    n_kb = s // BN
    items = n_kb * kv_heads
    text = fast_backward(w, variant_text("tail_kernel"))
    plan = resolve_plan(parse_solution(text, w).plan, w, NSM, "sm_90a")
    entry = backward_entry_point(int(w.symbols["D"]), causal, "HKV" in w.symbols, variant_text("tail_kernel"))
    main, tail = plan.launches[1], plan.launches[2]
    assert (main.kernel, tail.kernel) == (entry, entry + "_tail")
    assert main.grid[0] == max(items - items % NSM, 1) and tail.grid[0] == max(items % NSM * PIECES, 1)
    taken: dict[tuple, int] = {}
    for is_tail, launch in ((False, main), (True, tail)):
        for bx in range(launch.grid[0]):
            got = _decode(is_tail, bx, items, NSM, PIECES)
            if got is None:
                continue
            lin, piece = got
            kb, bkv = key_block(lin, n_kb, kv_heads)
            iters = n_iter(kb, s, qr, group, causal)
            lo, hi = (0, iters) if piece < 0 else (piece * iters // PIECES, (piece + 1) * iters // PIECES)
            for it in range(lo, hi):
                taken[(bkv, kb, it)] = taken.get((bkv, kb, it), 0) + 1
    assert set(taken) == all_units(s, qr, group, causal, kv_heads) and set(taken.values()) == {1}
    if wid.startswith("smoke_"):  # fewer key blocks than SMs: every block cut, so the checks reach the pieces
        assert items < NSM and main.grid[0] == 1 and tail.grid[0] == items * PIECES


@pytest.fixture(scope="module")
def compiled():
    """Every entry point of each text (the variant's own plan lines are D = 128's; the plans are checked apart)."""
    return {v: compile_source(variant_text(v), "cuda", "sm_90a") for v in ("tail_kernel", "late_d96+head_groups")}


@pytest.mark.parametrize("wid", ["mha_bwd_d128", "mha_bwd_d96_causal", "mha_bwd_d128_gqa_h32_kv8", "smoke_mha_bwd_d64"])
def test_a_workloads_text_keeps_only_what_its_plan_launches_and_compiles_to_the_same_code(wid, compiled):
    w = get_workload(wid)
    text = fast_backward(w, variant_text("tail_kernel"))
    entry = backward_entry_point(int(w.symbols["D"]), bool(w.causal), "HKV" in w.symbols, variant_text("tail_kernel"))
    r = compile_source(text, "cuda", "sm_90a", use_cache=False)
    assert r.status == "ok" and sorted(r.kernels) == sorted(["attn_bwd_pre", "attn_bwd_post", entry, entry + "_tail"])
    ls = loop_schedule()
    for name in (entry, entry + "_tail"):  # the kept entry points are the full text's, instruction for instruction
        assert ls.kernel_lines(r.cubin_path, name) == ls.kernel_lines(compiled["tail_kernel"].cubin_path, name), name


def test_every_kernel_assembles_and_every_plan_fits_the_h200(compiled):
    r = compiled["tail_kernel"]
    assert r.status == "ok" and not r.warnings, [w.message for w in r.warnings]
    mains = [k for k in r.kernels if k.startswith("attn_bwd_wgmma")]
    assert len(mains) == 18 and sum(k.endswith("_tail") for k in mains) == 9
    for name, k in r.kernels.items():
        assert k.spill_stores == k.spill_loads == 0 and k.smem_static == 0, name
    for name in ("attn_bwd_wgmma", "attn_bwd_wgmma_tail"):
        assert r.kernels[name].sass_opcodes["HGMMA"] == 40, name
    lim = DeviceLimits()
    for wid in BACKWARD:
        w = get_workload(wid)
        plan = resolve_plan(parse_solution(fast_backward(w, variant_text("tail_kernel")), w).plan, w, lim.sm_count,
                            "sm_90a")
        assert check_compiled(plan, {k: v.smem_static for k, v in r.kernels.items()}, lim) == [], wid


def _loop(result, kernel: str) -> list[str]:
    ls = loop_schedule()
    return ls.hgmma_span(ls.kernel_lines(result.cubin_path, kernel))


@pytest.mark.parametrize("kernel", ["attn_bwd_wgmma", "attn_bwd_wgmma_causal", "attn_bwd_wgmma_d64",
                                    "attn_bwd_wgmma_d96_causal"])
def test_the_main_launch_keeps_the_references_loop(compiled, kernel):
    """The main launch's block loop, SASS line by line in place: the reference's schedule (late_d96; pre_plain's at
    D = 128 and 64). grid_1d, level on the H200, held 637 of 641 lines at D = 64; tail_split's whole blocks, 7-8%
    slower, held none."""
    base, mine = _loop(compiled["late_d96+head_groups"], kernel), _loop(compiled["tail_kernel"], kernel)
    same = sum(a == b for a, b in zip(base, mine))
    assert len(mine) == len(base) and same >= 0.97 * len(base), (kernel, len(base), len(mine), same)
