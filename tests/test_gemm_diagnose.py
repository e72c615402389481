"""bench/gemm_diagnose.py on the CPU: every variant's edits apply exactly once to today's reference render (a template
change that moves an edited line fails here, not on the GPU), each variant changes the render, and the real kernels
among them (checked against torch on the GPU) keep every wgmma and TMA load of the reference."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gemm_diag_variants  # noqa: E402
import gemm_diagnose as gd  # noqa: E402
from ptxbench.workloads.solutions.gemm_template import default_params, render  # noqa: E402


@pytest.mark.parametrize("name", sorted(gd.VARIANTS))
def test_each_variants_edits_apply_once_to_the_reference(name):
    edits, changes = gd.VARIANTS[name]
    base = render(default_params().model_copy(update=changes))
    text = gd.edited(base, edits)
    assert (text != base) == bool(edits)
    assert ("diagnose:" in text) == bool(edits)


def test_the_copy_edits_build_on_the_reference_without_its_l2_priorities():
    """The reference carries l2_hints since round 14; tma_hot and the hint variants rewrite the unhinted copies, so
    they build on that point, which ref_nohints times beside them. Every other variant builds on the reference."""
    assert default_params().l2_hints and gd.VARIANTS["ref_nohints"] == ([], {"l2_hints": False})
    for name in ("tma_hot", "tma_hot_132", "c_first", "b_last", "a_last_b_first", "c_first_a_last_b_first"):
        assert gd.VARIANTS[name][1].get("l2_hints") is False, name
    for name in ("ref", "no_tma", "no_store", "bare", "serp", "bk32", "pf12"):
        assert "l2_hints" not in gd.VARIANTS[name][1], name


def test_an_edit_that_no_longer_applies_is_an_error():
    with pytest.raises(ValueError, match="applies 0 times"):
        gd.edited("int x;", [("int y;", "int z;")])


@pytest.mark.parametrize("name", [n for n in gd.CHECKED if gd.VARIANTS[n][0]])
def test_the_real_kernels_keep_the_references_loads_and_products(name):
    edits, changes = gd.VARIANTS[name]
    text = gd.edited(render(default_params().model_copy(update=changes)), edits)
    kernel = text.split('extern "C" __global__')[1]
    assert kernel.count("wgmma_m64k16_bf16<BN>(") == 1
    loads = re.findall(r"tma_load_2d\w*\((s[AB]) [^;]*&tm([AB]),", kernel)
    assert {("sA", "A"), ("sB", "B")} <= set(loads), loads  # A and B each loaded into their slots (perhaps multicast)
    assert "mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);" in kernel


@pytest.mark.parametrize("name,stages", [("bk32", 8), ("bk32_6", 6)])
def test_the_32_deep_kernels_plan_64b_swizzled_boxes_in_the_same_shared_memory(name, stages):
    from gemm_reference_bench import read_plan
    from ptxbench.workloads.solutions.gemm_template import SMEM_LIMIT

    edits, changes = gd.VARIANTS[name]
    text = gd.edited(render(default_params().model_copy(update=changes)), edits)
    plan = read_plan(text)
    for tmap, rows in (("A_map", 128), ("B_map", 256)):
        assert plan["tmap"][tmap]["box"] == [32, rows] and plan["tmap"][tmap]["swizzle"] == "64B"
    assert plan["tmap"]["C_map"]["swizzle"] == "128B"  # the epilogue's staging keeps its layout
    ring = stages * (128 + 256) * 32 * 2
    assert plan["launch"][0]["smem"] == ring + 2 * 2 * 64 * 128 + 16 * stages + 1024 <= SMEM_LIMIT
    assert f"constexpr int STAGES = {stages};" in text and "constexpr int BK = 32;" in text
    assert "make_desc_sw128" not in text.split('extern "C" __global__')[1]  # every operand descriptor is 64B's


def test_best_is_the_fastest_real_kernel_correct_in_every_run(tmp_path):
    def result(path, timing, correct):
        path.write_text(gd.json.dumps({"timing": {n: {"vs_ref_pct": v} for n, v in timing.items()},
                                       "correct": {n: {"ok": ok} for n, ok in correct.items()}}))
        return str(path)

    one = result(tmp_path / "1.json", {"ref": 0.0, "cublas": -5.0, "bare": -9.0, "serp": -0.4, "bk32": -1.0, "g16": 0.2},
                 {"ref": True, "serp": True, "bk32": True, "g16": True})
    two = result(tmp_path / "2.json", {"ref": 0.0, "cublas": -5.0, "bare": -9.0, "serp": -0.6, "bk32": -1.2, "g16": 0.1},
                 {"ref": True, "serp": True, "bk32": False, "g16": True})
    assert gd.best([one, two]) == "serp"  # bk32 is faster but wrong once; cuBLAS and bare are not candidates
    assert gd.best([one]) == "bk32"
    slower = result(tmp_path / "3.json", {"ref": 0.0, "serp": 0.3}, {"ref": True, "serp": True})
    assert gd.best([slower]) == ""


def test_sustained_clocks_reads_each_launcher_apart(monkeypatch):
    """Each launcher runs back to back for its own window and gets that window's readings (a fake sampler here:
    the GPU machine's nvidia-smi gives the real ones)."""
    import gpu_sampler
    import torch

    calls: dict[str, int] = {"a": 0, "b": 0}
    windows = []

    class FakeSampler:
        error = ""

        def __init__(self, period_ms, extra):
            assert "clocks.sm" in extra

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def window(self, t0, t1):
            windows.append((t0, t1))
            return {"samples": 3, "clocks.sm": 1980.0 - 100 * len(windows), "power.draw": 600.0}

    monkeypatch.setattr(gpu_sampler, "GpuSampler", FakeSampler)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    fns = {n: (lambda n=n: calls.__setitem__(n, calls[n] + 1)) for n in calls}
    out = gd.sustained_clocks(fns, 0.15)
    assert out == {"a": {"samples": 3, "clocks.sm": 1880.0, "power.draw": 600.0},
                   "b": {"samples": 3, "clocks.sm": 1780.0, "power.draw": 600.0}}
    assert calls["a"] > 20 and calls["b"] > 20
    assert windows[0][1] <= windows[1][0] + 0.1  # b's window starts after a's ends


def test_loop_clock_reads_the_busy_samples_of_the_timed_loop():
    from gpu_sampler import GpuSampler

    sampler = GpuSampler(extra=("clocks.sm", "power.draw"))  # nvidia-smi's lines (index, utilization, extras)
    for when, clock, power in [(0.5, 1980.0, 500.0),                                   # before the loop
                               (1.1, 1980.0, 90.0),                                    # an idle gap
                               *[(1.2 + i / 100, 1900.0 + 10 * i, 400.0 + i) for i in range(11)],
                               (3.0, 1400.0, 690.0)]:                                  # after it
        sampler.add_line(f"0, 100, {clock}, {power}", when)
    out = gd.loop_clock(sampler, 1.0, 2.0)
    assert out == {"samples": 11, "clocks.sm": [1910.0, 1950.0, 1990.0], "power.draw": [401.0, 405.0, 409.0]}
    assert gd.loop_clock(sampler, 5.0, 6.0) == {"samples": 0}


def test_library_kernels_reads_the_kernel_events_of_a_trace():
    import library_kernels as lk

    trace = {"traceEvents": [
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": {}},
        {"cat": "kernel", "name": "nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT", "dur": 742.1,
         "args": {"grid": [132, 1, 1], "block": [384, 1, 1], "registers per thread": 168, "shared memory": 215040}}]}
    assert lk.kernels_of(trace) == [{"name": "nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNT", "dur_us": 742.1,
                                     "grid": [132, 1, 1], "block": [384, 1, 1], "registers per thread": 168,
                                     "shared memory": 215040, "blocks per SM": None,
                                     "est. achieved occupancy %": None}]


@pytest.mark.parametrize("name,a,b", [("promo128", "128B", "128B"), ("promo64", "64B", "64B"),
                                      ("promo_none", "none", "none"), ("promo_a128", "128B", "256B"),
                                      ("promo_b128", "256B", "128B")])
def test_the_promotion_variants_change_only_the_plans_l2_promotion(name, a, b):
    from gemm_reference_bench import read_plan

    base = render(default_params())
    text = gd.edited(base, gd.VARIANTS[name][0])
    plan, ref_plan = read_plan(text), read_plan(base)
    assert (plan["tmap"]["A_map"]["l2_promotion"], plan["tmap"]["B_map"]["l2_promotion"]) == (a, b)
    for m in ("A_map", "B_map"):
        plan["tmap"][m].pop("l2_promotion"), ref_plan["tmap"][m].pop("l2_promotion")
    assert plan == ref_plan
    assert text.split("*/", 1)[1] == base.split("*/", 1)[1]  # the kernel's code is the reference's


@pytest.mark.parametrize("name,lines", [("lpf6", 32), ("lpf10", 32), ("lpf16", 32), ("lpf10_b", 16)])
def test_the_lsu_prefetch_variants_pass_a_and_b_and_prefetch_their_share(name, lines):
    """The plan passes A and B where the kernel takes them (one argument per parameter, in order), and the producer
    prefetches 16 rows of each operand a k-block (unrolled: one prefetch.L2 per line in the render's loop body)."""
    from gemm_reference_bench import read_plan

    text = gd.edited(render(default_params()), gd.VARIANTS[name][0])
    args = read_plan(text)["launch"][0]["args"]
    assert args[3:6] == ["C", "A", "B"]
    params = text.split("gemm_bf16_tn(", 1)[1].split(") {", 1)[0]
    assert params.count(",") + 1 == len(args)
    assert "Ag," in params and "Bg," in params
    producer = text.split("setmaxnreg_dec<PRODUCER_REGS>();", 1)[1].split("setmaxnreg_inc<CONSUMER_REGS>();", 1)[0]
    assert producer.count('prefetch.L2 [%0];') == lines // 16
    assert producer.count("for (int i = 0; i < 16; ++i, p += K)") == lines // 16
    assert "cp.async.bulk.prefetch" not in producer  # not the TMA unit's prefetch (round 8)


@pytest.mark.parametrize("name", ["pw6", "pw10", "pw16", "pw10_b"])
def test_the_prefetch_warp_variants_pace_a_second_warp_by_a_counter_in_their_shared_memory(name):
    from gemm_reference_bench import read_plan
    from ptxbench.workloads.solutions.gemm_template import SMEM_LIMIT

    base = render(default_params())
    text = gd.edited(base, gd.VARIANTS[name][0])
    plan, ref_plan = read_plan(text)["launch"][0], read_plan(base)["launch"][0]
    assert plan["args"][3:6] == ["C", "A", "B"]
    assert plan["smem"] == ref_plan["smem"] + 16 <= SMEM_LIMIT  # the counter after the barriers, in the plan's bytes
    producer = text.split("setmaxnreg_dec<PRODUCER_REGS>();", 1)[1].split("setmaxnreg_inc<CONSUMER_REGS>();", 1)[0]
    loader, warp = producer.split("} else if (t >= 32 && t < 64) {", 1)
    assert "*loaded = g++;" in loader and "prefetch.L2" not in loader  # the TMA thread only counts
    assert warp.count("prefetch.L2 [%0];") == 1 and "while (*loaded < g)" in warp
    assert "mbar_wait" not in warp  # no barrier phase to fall behind on
    assert "*loaded = -1;" in text.split("__syncthreads();", 1)[0]  # set before any thread reads it


@pytest.mark.parametrize("name,grid", [("dyn", "min(min(num_sms, 128), cdiv(M, 128) * cdiv(N, 256))"),
                                       ("dyn_132", "min(num_sms, cdiv(M, 128) * cdiv(N, 256))")])
def test_the_run_time_tile_variants_hand_tiles_through_the_ring_and_reset_their_counters(name, grid):
    from gemm_reference_bench import read_plan

    base = render(default_params().model_copy(update=gd.VARIANTS[name][1]))
    text = gd.edited(base, gd.VARIANTS[name][0])
    plan = read_plan(text)["launch"][0]
    assert plan["grid"][0] == grid and plan["smem"] == read_plan(base)["launch"][0]["smem"] + 16
    producer = text.split("setmaxnreg_dec<PRODUCER_REGS>();", 1)[1].split("setmaxnreg_inc<CONSUMER_REGS>();", 1)[0]
    consumer = text.split("setmaxnreg_inc<CONSUMER_REGS>();", 1)[1]
    # the producer names each tile in its first stage before that stage's arrival, and ends with a stage of -1
    assert producer.index("if (k == 0) tile_at[stage] = ct;") < producer.index("mbar_arrive_expect_tx(&full[stage]")
    assert "tile_at[stage] = -1;\n      mbar_arrive(&full[stage]);" in producer
    # the last CTA out resets both counters, so the next launch starts from tile blockIdx.x + gridDim.x again
    assert "atomicAdd(&dyn_done, 1) == gridDim.x - 1) { atomicExch(&dyn_next, 0); atomicExch(&dyn_done, 0); }" in producer
    # the consumers read the tile after their wait on the stage, and stop at -1
    loop = consumer.split("for (;;) {", 1)[1]
    assert loop.index("mbar_wait(&full[stage], phase);") < loop.index("const int ct = tile_at[stage];") < \
        loop.index("if (ct < 0) break;") < loop.index("tile_coords(ct,")
    assert "ct += step" not in consumer and "ct += step" not in producer


def test_the_traced_kernel_takes_its_scratch_buffer_and_the_summary_reads_its_slots():
    from gemm_reference_bench import read_plan

    text = gd.edited(render(default_params()), gd.VARIANTS["trace"][0])
    plan = read_plan(text)
    args = plan["launch"][0]["args"]
    assert args[-1] == "scratch:trace" and plan["scratch"]["trace"]["dtype"] == "int64"
    assert plan["scratch"]["trace"]["shape"] == [plan["launch"][0]["grid"][0], gemm_diag_variants.TRACE_SLOTS]
    params = text.split("gemm_bf16_tn(", 1)[1].split(") {", 1)[0]
    assert params.count(",") + 1 == len(args) and params.rstrip().endswith("trace")
    # two CTAs, two tiles each (the rest of their slots the scratch poison): times in ns, the summary in us
    poison = int.from_bytes(b"\x5a" * 8, "little")
    run = [[5, 1000, 60000, 112000] + [poison] * 28, [7, 2000, 62000, 115000] + [poison] * 28]
    summary = gd.trace_summary([run])
    assert summary["tiles"] == 4 and summary["finish_us"][-1] == 114.0 and summary["finish_us"][0] == 111.0
    assert summary["first_tile_us"][0] == 59.0 and summary["tile_us"][0] == 52.0 and summary["tile_us"][-1] == 53.0


def test_best_with_a_minimum_gain_is_the_paired_evaluations_rule(tmp_path):
    def result(path, serp):
        path.write_text(gd.json.dumps({"timing": {"ref": {"vs_ref_pct": 0.0}, "serp": {"vs_ref_pct": serp}},
                                       "correct": {"ref": {"ok": True}, "serp": {"ok": True}}}))
        return str(path)

    one, two = result(tmp_path / "1.json", -0.3), result(tmp_path / "2.json", -0.1)
    assert gd.best([one, two]) == "serp" and gd.best([one, two], 0.2) == "" and gd.best([one], 0.2) == "serp"


def test_a_mc_pairs_two_n_tiles_and_multicasts_halves_of_a():
    """Round 25's a_mc: a 2-CTA cluster on two N tiles of one tile row; each CTA loads half of A's box (64 of 128 rows)
    and multicasts it to both, and its own whole B box; the plan's boxes say so."""
    from gemm_reference_bench import read_plan

    edits, changes = gd.VARIANTS["a_mc"]
    assert changes == {"cluster_m": 2}
    text = gd.edited(render(default_params().model_copy(update=changes)), edits)
    plan = read_plan(text)
    assert plan["launch"][0]["cluster"] == [2, 1, 1]
    assert plan["tmap"]["A_map"]["box"] == [64, 64] and plan["tmap"]["B_map"]["box"] == [64, 256]
    kernel = text.split('extern "C" __global__')[1]
    assert "tma_load_2d_multicast(sA + kc * A_CHUNK + cta_rank * A_SLICE, &tmA" in kernel
    assert "tma_load_2d_multicast(sB" not in kernel and "tma_load_2d_hint(sB + kc * B_CHUNK, &tmB" in kernel
    assert kernel.count("const int n0 = (tn * CLUSTER_M + cta_rank) * BN;") == 2  # producer and consumers alike
