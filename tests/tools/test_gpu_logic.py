"""CPU tests of the GPU evaluator's pure logic: the correctness rule, bootstrap intervals, plan limits,
the byte-bounded LRU, guarded buffers and the roofline flags."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ptxbench.tools.gpu import buffers, ceilings
from ptxbench.tools.gpu.cache import ByteLRU
from ptxbench.tools.gpu.correctness import compare, output_digest, replay_note
from ptxbench.tools.gpu.limits import DeviceLimits, check_compiled, check_function, check_plan
from ptxbench.tools.gpu.timing import bootstrap_median_ci, bootstrap_ratio_ci, speedup, summarize
from ptxbench.tools.solution.plan import ResolvedArg, ResolvedLaunch, ResolvedPlan, ResolvedTensorMap
from ptxbench.workloads.schema import Tolerance

TOL = Tolerance(atol=1e-2, rtol=1e-2, max_rel_fro=1e-2)


def _ref(shape=(64, 48), seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


# ---- the correctness rule ----
def test_bf16_rounding_of_the_reference_passes():
    ref = _ref()
    s = compare(ref.to(torch.bfloat16), ref, TOL, trial=0, tensor="C")
    assert s.passed and s.frac_matched == 1.0 and s.n_nan == 0 and s.rel_fro_err < 5e-3


def test_one_bad_element_fails_and_is_located():
    ref = _ref()
    out = ref.clone()
    out[17, 5] += 0.5
    s = compare(out, ref, TOL, trial=1, tensor="C")
    assert not s.passed and s.worst_index == [17, 5]
    assert s.frac_matched == pytest.approx(1 - 1 / ref.numel())
    assert s.max_abs_err == pytest.approx(0.5, rel=1e-5)
    assert s.worst_expected == pytest.approx(float(ref[17, 5]))


def test_element_rule_needs_both_abs_and_rel_to_fail():
    ref = torch.full((10,), 100.0)
    ref[0] = 1.0
    out = ref.clone()
    out[1:] += 0.5  # abs 0.5 > atol but rel 0.005 < rtol: passes the element rule
    s = compare(out, ref, Tolerance(atol=1e-2, rtol=1e-2, max_rel_fro=1.0), trial=0, tensor="x")
    assert s.passed


def test_nan_and_inf_fail_and_are_counted():
    ref = _ref()
    out = ref.clone()
    out[0, 0] = float("nan")
    out[1, 1] = float("inf")
    s = compare(out, ref, TOL, trial=0, tensor="C")
    assert not s.passed and s.n_nan == 1 and s.n_inf == 1
    assert s.worst_index in ([0, 0], [1, 1])


def test_all_zero_output_fails_even_when_the_reference_is_tiny():
    ref = _ref(scale=1e-3)  # every element within atol of zero: the element rule alone would pass
    s = compare(torch.zeros_like(ref), ref, TOL, trial=0, tensor="dQ")
    assert not s.passed and "all-zero" in s.note and s.rel_fro_err == pytest.approx(1.0)


def test_constant_output_is_named():
    ref = _ref()
    s = compare(torch.ones_like(ref), ref, TOL, trial=0, tensor="C")
    assert not s.passed and "constant output" in s.note


def test_unwritten_poison_is_named_and_counted_on_real_buffers():
    g = buffers.allocate("C", (8, 8), torch.bfloat16, device="cpu")
    buffers.poison_(g.data)
    assert torch.isnan(g.data.float()).all()
    assert buffers.count_poison(g.data) == 64
    g.data[:4] = 1.0
    assert buffers.count_poison(g.data) == 32
    # a NaN the kernel computed is not the poison
    g.data[4] = float("nan")
    assert buffers.count_poison(g.data) == 24
    s = compare(g.data, torch.ones(8, 8), TOL, trial=0, tensor="C", unwritten=buffers.count_poison(g.data))
    assert not s.passed and "never written" in s.note


def test_relative_frobenius_bound_alone_can_fail():
    ref = _ref()
    out = ref + 0.009 * torch.sign(ref)  # every element within atol, but a systematic 0.9% bias... of abs
    s = compare(out, ref, Tolerance(atol=1e-2, rtol=1e-2, max_rel_fro=1e-3), trial=0, tensor="C")
    assert not s.passed and "Frobenius" in s.note


def test_shape_mismatch_fails():
    s = compare(torch.zeros(3, 4), torch.zeros(4, 3), TOL, trial=0, tensor="C")
    assert not s.passed and "shape" in s.note


def test_replay_detection_by_digest():
    a = _ref(seed=1).to(torch.bfloat16)
    b = _ref(seed=2).to(torch.bfloat16)
    da, db = output_digest(a), output_digest(b)
    assert da == output_digest(a.clone()) and da != db
    assert replay_note(da, {0: db}) == ""
    assert "trial 0" in replay_note(da, {0: da})
    c = a.clone()
    c.view(-1)[100] = c.view(-1)[101]  # one element changed is a different digest
    assert output_digest(c) != da or bool((c == a).all())


# ---- guard zones ----
def test_guard_zone_catches_writes_past_either_end():
    g = buffers.allocate("C", (100,), torch.float32, device="cpu")
    assert g.guard_damage() == (0, 0)
    assert g.pointer % 1024 == g.raw.data_ptr() % 1024
    g.raw[buffers.GUARD_BYTES + g.nbytes] = 0  # the first byte after the data
    g.raw[buffers.GUARD_BYTES - 1] = 0  # the last byte before it
    assert g.guard_damage() == (1, 1)


def test_buffer_set_reset_and_damage_report():
    bs = buffers.allocate_set([("A", (4, 4), "bfloat16", "input"), ("C", (4, 4), "float32", "output")],
                              [("acc", [16], "float32", True), ("tmp", [8], "int32", False)], device="cpu")
    bs.load_inputs({"A": torch.ones(4, 4, dtype=torch.bfloat16)})
    assert torch.isnan(bs.tensors["C"].data).all() and (bs.scratch["acc"].data == 0).all()
    assert not (bs.scratch["tmp"].data.view(torch.uint8) == buffers.POISON_INT).all()  # garbage, not a pattern
    assert bs.damaged_guards() == []
    bs.tensors["C"].raw[-1] = 1
    # only the side that was written, and that the count is of the guard zone ("0 bytes changed before the buffer,
    # 1 bytes after it" named the untouched side too)
    assert bs.damaged_guards() == ["C: 1 bytes in the 64 KB after its end"]
    bs.tensors["C"].raw[0] = 1
    assert bs.damaged_guards() == ["C: 1 bytes in the 64 KB before its start and 1 bytes in the 64 KB after its end"]



def test_scratch_not_asked_zeroed_holds_nothing_a_kernel_can_count_on():
    """Scratch the plan does not ask to be zeroed is refilled outside the measured interval before every call. Filled
    with one known pattern (0x5A bytes, a fixed NaN), it was a free initialisation: a kernel could take the pattern
    for zero (a split-K workspace accumulated in integers from 0x5A5A5A5A..., tile counters starting there) and skip
    the zeroing that `zero = true` would have timed. Every refill is fresh random bytes instead."""
    bs = buffers.allocate_set([("C", (4, 4), "float32", "output")],
                              [("ws", [4096], "int64", False), ("acc", [4096], "float32", False)], device="cpu")
    first = {n: g.data.view(torch.uint8).clone() for n, g in bs.scratch.items()}
    bs.reset()
    for name, g in bs.scratch.items():
        now = g.data.view(torch.uint8)
        assert (now != first[name]).float().mean() > 0.9, name  # drawn afresh, not the last call's bytes
        assert len(torch.unique(now)) > 200, name  # and no one value a kernel could take for 'empty'
    assert torch.isnan(bs.tensors["C"].data).all() and buffers.count_poison(bs.tensors["C"].data) == 16

# ---- timing statistics ----
def test_bootstrap_median_ci_contains_the_median_and_narrows_with_n():
    rng = np.random.default_rng(0)
    small = rng.normal(1.0, 0.05, 30)
    big = rng.normal(1.0, 0.05, 3000)
    lo, hi = bootstrap_median_ci(small)
    assert lo <= np.median(small) <= hi
    blo, bhi = bootstrap_median_ci(big)
    assert (bhi - blo) < (hi - lo) and blo <= np.median(big) <= bhi and abs(np.median(big) - 1.0) < 0.01


def test_speedup_of_identical_distributions_is_one_with_an_interval_containing_one():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.8, 0.01, 150), rng.normal(0.8, 0.01, 150)
    s, (lo, hi) = speedup(a, b)
    assert abs(s - 1) < 0.01 and lo < 1 < hi
    s2, (lo2, hi2) = speedup(a, a / 2)  # candidate twice as fast
    assert s2 == pytest.approx(2.0) and lo2 <= 2.0 <= hi2
    assert bootstrap_ratio_ci(a, a) == (pytest.approx(1.0), pytest.approx(1.0))
    st = summarize([1.0, 2.0, 3.0])
    assert st.median_ms == 2.0 and st.n == 3 and st.min_ms == 1.0


# ---- roofline ----
def test_sol_and_flags():
    ceil = {"tflops_bf16": 700.0, "hbm_gbps": 4000.0}
    flops, nbytes = 2 * 8192 * 7168 * 5120, 274e6
    assert ceilings.roofline_ms(flops, nbytes, ceil) == pytest.approx(flops / 700e9)
    assert ceilings.sol_pct(flops, nbytes, 2 * flops / 700e9, ceil) == pytest.approx(50.0)
    assert ceilings.flags(1.0, flops, nbytes, 1.0, ceil, "NVIDIA H200") == []
    assert ceilings.flags(1.6, flops, nbytes, 1.0, ceil, "NVIDIA H200") == ["implausible_speedup"]
    assert "above_roofline" in ceilings.flags(1.0, flops, nbytes, 0.1, ceil, "NVIDIA H200")  # 6000 TFLOP/s
    assert "above_roofline" in ceilings.flags(1.0, flops, nbytes, 0.5, ceil, "Some GPU")  # > 1.3 x measured
    # The smoke attention on the H200: 0.0146 ms against cuDNN's 0.0637 ms, both far below the roofline
    tiny_flops, tiny_bytes = 4 * 1 * 2 * 256 * 256 * 64, 4 * 2 * 256 * 64 * 2
    assert ceilings.flags(4.37, tiny_flops, tiny_bytes, 0.0146, ceil, "NVIDIA H200") == [
        "implausible_speedup", "library_overhead_bound"]
    assert ceilings.flags(1.6, flops, nbytes, 1.0, ceil, "NVIDIA H200") == ["implausible_speedup"]  # library at 54% SOL


# ---- plan limits ----
def _launch(**kw):
    base = dict(kernel="k", grid=(4, 1, 1), block=(128, 1, 1), cluster=None, smem=0,
                args=[ResolvedArg(kind="tensor", name="A"), ResolvedArg(kind="scalar", name="M", type="i32", value=8)])
    base.update(kw)
    return ResolvedLaunch(**base)


def test_plan_limits_name_the_limit():
    lim = DeviceLimits()
    sizes = {"A": 1024}
    ok = ResolvedPlan(num_sms=132, launches=[_launch()])
    assert check_plan(ok, lim, sizes) == []
    errs = check_plan(ResolvedPlan(num_sms=132, launches=[_launch(block=(2048, 1, 1), smem=300000,
                                                                     grid=(3, 1, 1), cluster=(2, 1, 1))]), lim, sizes)
    text = " | ".join(errs)
    assert "2048 threads" in text and "1024" in text
    assert "300000" in text and "232448" in text
    assert "not a multiple of cluster" in text
    errs = check_plan(ResolvedPlan(num_sms=132, launches=[_launch(cluster=(16, 1, 1), grid=(16, 1, 1))]), lim, sizes)
    assert any("cluster" in e and "8" in e for e in errs)
    errs = check_plan(ResolvedPlan(num_sms=132, launches=[_launch(grid=(1, 70000, 1))]), lim, sizes)
    assert any("grid.y" in e and "65535" in e for e in errs)
    errs = check_plan(ResolvedPlan(num_sms=132, launches=[_launch(args=[ResolvedArg(kind="tensor", name="Z")])]), lim, sizes)
    assert any("unknown tensor 'Z'" in e for e in errs)


def test_function_checks_catch_wrong_argument_lists_and_register_limits():
    lim = DeviceLimits()
    launch = _launch()
    assert check_function(launch, 0, 32, 0, 1024, [8, 4], lim) == []
    errs = check_function(launch, 0, 32, 0, 1024, [8, 4, 4], lim)
    assert "takes 3 parameters" in errs[0] and "passes 2" in errs[0]
    errs = check_function(launch, 0, 32, 0, 1024, [8, 8], lim)
    assert "argument 2" in errs[0] and "8 bytes" in errs[0]
    errs = check_function(_launch(block=(512, 1, 1)), 0, 255, 0, 256, [8, 4], lim)
    assert "255 registers" in errs[0] and "256" in errs[0]
    errs = check_function(_launch(smem=200000), 0, 32, 40000, 1024, [8, 4], lim)
    assert "240000" in errs[0]


def test_compiled_checks_add_static_shared_memory_to_each_launchs_dynamic_amount():
    lim = DeviceLimits()
    plan = ResolvedPlan(num_sms=132, launches=[_launch(kernel="pre"), _launch(kernel="main", smem=232192)])
    assert check_compiled(plan, {"pre": 0, "main": 0}, lim) == []
    assert check_compiled(plan, {"pre": 1024, "main": 256}, lim) == []  # 232,448: at the limit, allowed
    assert check_compiled(plan, {"pre": 0, "main": 1024}, lim) == [
        "launch 2 (main): static (1024) + dynamic (232192) shared memory = 233216 bytes exceeds the opt-in limit of "
        "232448 bytes"]
    assert check_compiled(plan, {"pre": 0}, lim) == []  # a kernel ptxas did not report is left to the worker


def test_tmap_checks():
    lim = DeviceLimits()
    t = ResolvedTensorMap(name="a", tensor="A", source="tensor", dtype="bfloat16", rank=2, dims=[64, 128], strides=[64],
                          byte_strides=[128], box=[64, 64], elem_strides=[1, 1], swizzle="128B", l2_promotion="none",
                          oob_fill="zero")
    launch = _launch(args=[ResolvedArg(kind="tmap", name="a")])
    plan = ResolvedPlan(num_sms=132, launches=[launch], tmaps=[t])
    assert check_plan(plan, lim, {"A": 64 * 128 * 2}) == []
    bad = t.model_copy(update={"box": [128, 300], "byte_strides": [130]})
    errs = " | ".join(check_plan(plan.model_copy(update={"tmaps": [bad]}), lim, {"A": 64 * 128 * 2}))
    assert "box[1] = 300" in errs and "multiples of 16" in errs and "swizzle span" in errs
    assert any("spans" in e for e in check_plan(plan, lim, {"A": 100}))


# ---- the LRU ----
def test_byte_lru_evicts_least_recently_used_within_budget():
    evicted = []
    c = ByteLRU(100, on_evict=lambda k, v: evicted.append(k))
    c.put("a", 1, 40)
    c.put("b", 2, 40)
    assert c.get("a") == 1  # a is now the most recent
    c.put("c", 3, 40)
    assert evicted == ["b"] and c.keys() == ["a", "c"] and c.total == 80
    made = []
    assert c.get_or_make("d", lambda: (made.append(1) or 4, 30)) == 4
    assert c.get_or_make("d", lambda: (made.append(1) or 5, 30)) == 4 and len(made) == 1
    assert c.total <= 100
    c.put("huge", 0, 500)  # larger than the budget: kept alone
    assert c.keys() == ["huge"] and c.stats()["evictions"] >= 3
    c.clear()
    assert len(c) == 0 and c.total == 0


def test_plan_iterations_full_for_fast_short_for_slow_and_fitted_to_the_watchdog():
    from ptxbench.tools.gpu.messages import GpuJob
    from ptxbench.tools.gpu.timing import SLOW_ITERS, plan_iterations

    job = GpuJob(workload="gemm_bf16_m8192_n7168_k5120", timeout_s=30.0)
    assert plan_iterations(job, 1.0) == (10, 50, 3, False)  # 160 calls x 1 ms fit 18 s
    assert plan_iterations(job, 1.0, slow=True) == (2, SLOW_ITERS, 1, True)
    # 200 ms a call: the full 160 calls (32 s) overrun 0.6 x 30 s; fewer iterations, flagged reduced
    warmup, iters, trials, reduced = plan_iterations(job, 200.0)
    assert (warmup, trials, reduced) == (2, 3, True) and (warmup + iters * trials) * 200.0 <= 18_000
    # 2 s a call and slow: even 2 + 15 calls (34 s) overrun, so the iterations shrink to what fits 18 s
    assert plan_iterations(job, 2000.0, slow=True) == (2, 7, 1, True)
    assert plan_iterations(job, 10_000.0, slow=True) == (2, 5, 1, True)  # never fewer than 5


def test_a_plan_whose_buffers_exceed_the_gpu_is_a_plan_error():
    from ptxbench.tools.gpu.limits import DeviceLimits, check_memory

    lim = DeviceLimits(total_memory=141 * 2**30)
    gemm = {"A": 84 * 2**20, "B": 73 * 2**20, "C": 117 * 2**20}
    assert check_memory(gemm, 157 * 2**20, 3, lim) == []
    six_scratch = {**gemm, **{f"s{i}": 32 * 2**30 for i in range(6)}}
    errs = check_memory(six_scratch, 157 * 2**20, 3, lim)
    assert len(errs) == 1 and "GiB for the 3 input sets" in errs[0] and "s0 32.0 GiB" in errs[0]
    # a module-level array the driver allocates at load (a 32 GiB `.global` assembles to a few KB) counts once
    assert check_memory(gemm, 157 * 2**20, 3, lim, module_bytes=60 * 2**30) == []
    errs = check_memory(gemm, 157 * 2**20, 3, lim, module_bytes=80 * 2**30)
    assert len(errs) == 1 and "the module's globals 80.0 GiB" in errs[0]
    # a kernel's local frame, reserved for every thread the GPU holds (2048 x 132): 256 KB a thread is 66 GiB
    from ptxbench.tools.gpu.limits import local_reservation

    assert local_reservation(256 << 10, lim) == (256 << 10) * 2048 * 132
    assert check_memory(gemm, 157 * 2**20, 3, lim, local_bytes=local_reservation(128 << 10, lim)) == []
    errs = check_memory(gemm, 157 * 2**20, 3, lim, local_bytes=local_reservation(512 << 10, lim))
    assert len(errs) == 1 and "local memory" in errs[0] and "132.0 GiB" in errs[0]


def test_a_module_global_of_any_size_is_counted_from_the_cubin():
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.gpu.module_state import module_globals

    ptx = (".version 8.0\n.target sm_90a\n.address_size 64\n.global .align 8 .b8 big[34359738368];\n"
           ".visible .entry k(.param .u64 p) {\n  .reg .b64 %rd<2>;\n  ld.param.u64 %rd1, [p];\n"
           "  st.global.u64 [big], %rd1;\n  ret;\n}\n")
    r = compile_source(ptx, "ptx", "sm_90a")
    assert r.status == "ok", r.errors
    cubin = open(r.cubin_path, "rb").read()
    assert len(cubin) < 64 * 1024 and sum(g.size for g in module_globals(cubin)) == 2**35
