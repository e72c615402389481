"""The L2 flush each timed call starts from (tools/gpu/timing.L2Flush): read (the default: a cold L2 with clean lines) or
written, as the field usually does it. The mode travels from the command line and the trajectory's config through
EvalOptions to the GPU worker's job, and comes back in the timing record; records and runs from before the mode
existed keep the written flush they were measured under. The GPU tests at the end measure what the mode changes, and
that under the default a kernel's cache hints no longer decide how much of the flush's write-back it pays."""
from __future__ import annotations

import pytest

from ptxbench.agent.loop.optimize import eval_options
from ptxbench.agent.loop.state import OptimizeConfig
from ptxbench.tools.evaluate import gpu_job
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.messages import GpuJob
from ptxbench.tools.gpu.timing import L2_FLUSH_MODES, L2Flush
from ptxbench.tools.results import DEFAULT_L2_FLUSH, LEGACY_L2_FLUSH, Timing


def test_a_new_evaluation_reads_and_an_old_record_was_written():
    assert L2_FLUSH_MODES == ("write", "read") and (DEFAULT_L2_FLUSH, LEGACY_L2_FLUSH) == ("read", "write")
    assert EvalOptions().l2_flush == GpuJob(workload="w").l2_flush == OptimizeConfig(workload="w").l2_flush == "read"
    assert L2Flush(1 << 20).mode == "read"
    assert Timing.model_validate({"candidate": {"median_ms": 1.0, "ci_low_ms": 1.0, "ci_high_ms": 1.0, "n": 1}}
                                 ).l2_flush == "write"  # records written before the option read as they were measured


def test_both_commands_default_to_the_read_flush():
    import inspect

    from ptxbench.agent.cli.cmd_eval import eval_cmd
    from ptxbench.agent.cli.cmd_optimize import optimize

    for command in (eval_cmd, optimize):
        assert inspect.signature(command).parameters["l2_flush"].default.default == "read", command


def test_a_run_saved_before_the_mode_resumes_under_the_written_flush():
    """An optimize run's manifest without the mode goes on under the flush its first turns were timed with; one that
    names it keeps it."""
    from ptxbench.agent.loop.optimize import config_to_resume

    saved = {"workload": "gemm_bf16_m64_n7168_k5120", "model": "builtin/tuner"}
    assert config_to_resume({"trajectories": ["t"], "config": saved})[0].l2_flush == "write"
    assert config_to_resume({"trajectories": ["t"], "config": {**saved, "l2_flush": "read"}})[0].l2_flush == "read"
    assert config_to_resume({"trajectories": ["t"], "configs": {"t": {**saved, "l2_flush": "read"}},
                             "config": saved})[0].l2_flush == "read"


def test_a_bench_run_records_its_flush_and_an_old_one_resumes_written(tmp_path):
    from ptxbench.agent.bench.matrix import BenchConfig
    from ptxbench.agent.bench.runner import open_run
    from ptxbench.agent.records.manifest import build_manifest
    from ptxbench.agent.records.rundir import write_manifest

    matrix = BenchConfig(models=["builtin/tuner"], workloads=["gemm_bf16_m64_n7168_k5120"], trajectories=1)
    fresh = open_run(matrix, tmp_path / "new", resume=False)
    assert fresh.optimize["l2_flush"] == "read"
    assert open_run(matrix.model_copy(update={"optimize": {"l2_flush": "write"}}), tmp_path / "w",
                    resume=False).optimize["l2_flush"] == "write"  # a chosen mode is kept
    old = tmp_path / "old"
    old.mkdir()
    write_manifest(old, build_manifest(matrix.model_dump(mode="json"), "bench", ["t"], "sm_90a"))
    assert open_run(None, old, resume=True).optimize["l2_flush"] == "write"


def test_a_read_flush_travels_from_the_config_to_the_gpu_job():
    options = eval_options(OptimizeConfig(workload="gemm_bf16_m64_n7168_k5120", l2_flush="read"))
    assert options.l2_flush == "read"
    job = gpu_job("gemm_bf16_m64_n7168_k5120", b"cubin", {}, options.model_copy(update={"iters": 7}))
    assert job.l2_flush == "read" and job.iters == 7
    assert GpuJob.model_validate_json(job.model_dump_json()).l2_flush == "read"  # as the worker receives it


def test_an_unknown_mode_is_refused_at_every_door():
    with pytest.raises(ValueError, match="expected one of write, read"):
        L2Flush(1 << 20, "clean")
    for model, fields in ((EvalOptions, {}), (GpuJob, {"workload": "w"}), (OptimizeConfig, {"workload": "w"})):
        with pytest.raises(ValueError):
            model(**fields, l2_flush="clean")


@pytest.mark.gpu
def test_a_read_flush_spares_a_memory_bound_call_the_write_back():
    """A read of 73 MB (the decode GEMMs' B) after each flush: the written flush leaves about 50 MB of dirty lines that
    the read pays the write-back of, so it runs well slower than after the read flush (19-26% on the H200, round 30 of
    bench/results/gemm_sweep.md); a call that touches no memory is level."""
    import torch

    from ptxbench.tools.gpu.timing import Side, evaluation_flush, time_sides

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    big = torch.randn(7168, 5120, device="cuda", dtype=torch.bfloat16)
    one = torch.zeros(1, device="cuda")
    sides = [Side(lambda: big.sum()), Side(lambda: one.add_(1.0))]
    times = {mode: time_sides(sides, flush=evaluation_flush(l2, mode), warmup=3, iters=30, trials=1)
             for mode in L2_FLUSH_MODES}
    med = {mode: [sorted(t)[len(t) // 2] for t in ts] for mode, ts in times.items()}
    assert med["read"][0] < 0.9 * med["write"][0], med
    assert med["read"][1] == pytest.approx(med["write"][1], rel=0.25, abs=0.002), med


DECODE = "gemm_bf16_m64_n7168_k5120"
# the hinted decode render's B load, and the same load kept in L2 (evict_last) instead of streamed
B_STREAMED = "tma_load_2d_hint(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0, stream);"
B_KEPT = "tma_load_2d_hint(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0, keep);"


def test_the_decode_variants_differ_in_b_s_eviction_priority_only():
    from ptxbench.workloads.solutions.gemm_template import params_for, render

    plain, hinted = render(params_for(DECODE)), render(params_for(DECODE, l2_hints=True))
    assert B_STREAMED not in plain and hinted.count(B_STREAMED) == 1
    kept = hinted.replace(B_STREAMED, B_KEPT)
    assert kept.count(B_KEPT) == 1 and "const uint64_t keep = l2_policy<true>()" in kept


def _decode_sides(state, sources: list[str]) -> tuple[list, list]:
    """Each source (a decode GEMM render) built through the harness's own path, checked to compute C, and a timed
    side that launches it on the same inputs every call."""
    import torch

    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.gpu.runner import Candidate, new_buffers
    from ptxbench.tools.gpu.timing import Side
    from ptxbench.tools.solution.parse import parse_solution, resolve_plan
    from ptxbench.workloads.registry import get_workload

    wl = get_workload(DECODE)
    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = {n: torch.randn(wl.shape(n), device="cuda", dtype=torch.bfloat16, generator=g) for n in ("A", "B")}
    expected = inputs["A"].float() @ inputs["B"].float().T
    sides, keep = [], []
    for source in sources:
        sol = parse_solution(source, wl, "sm_90a")
        comp = compile_source(sol.source, sol.language, "sm_90a", wl)
        plan = resolve_plan(sol.plan, wl, state.limits.sm_count, "sm_90a")
        cand = Candidate(open(comp.cubin_path, "rb").read(), plan, state, wl)
        bufs = new_buffers(wl, plan)
        bufs.load_inputs(inputs)
        bufs.reset()
        binding = cand.bind(bufs)
        cand.launch(binding)
        torch.cuda.synchronize()
        out = bufs.tensors["C"].data.view(wl.shape("C")).float()
        assert float((out - expected).norm() / expected.norm()) < 1e-2  # every variant computes C
        sides.append(Side(call=lambda c=cand, b=binding: c.launch(b)))
        keep.append((cand, bufs))
    return sides, keep


def _median_ratios(sides, flush) -> list[float]:
    from ptxbench.tools.gpu.timing import time_sides

    times = time_sides(sides, flush=flush, warmup=3, iters=40, trials=1)
    med = [sorted(t)[len(t) // 2] for t in times]
    return [m / med[0] for m in med]


@pytest.mark.gpu
def test_under_the_default_flush_a_cache_hint_does_not_dodge_the_write_back():
    """The M = 64 decode GEMM's reference with and without the L2 eviction priorities (B's loads evict_first): after a
    written flush the hinted kernel spares the flush's dirty lines and skips part of their write-back (11-12% faster on
    the H200, bench/results/gemm_sweep.md round 33), the same work timed cheaper; after the default read flush there
    is nothing to spare and the two read level."""
    from ptxbench.tools.gpu.inprocess import in_process_worker
    from ptxbench.tools.gpu.timing import evaluation_flush
    from ptxbench.workloads.solutions.gemm_template import params_for, render

    with in_process_worker() as state:
        sides, _keep = _decode_sides(state, [render(params_for(DECODE)), render(params_for(DECODE, l2_hints=True))])
        ratio = {mode: _median_ratios(sides, evaluation_flush(state.limits.l2_bytes, mode))[1]
                 for mode in ("write", "read")}
    assert ratio["write"] < 0.95, ratio  # the artefact the written flush leaves
    assert ratio["read"] == pytest.approx(1.0, abs=0.03), ratio  # the default leaves nothing to dodge


@pytest.mark.gpu
def test_lines_kept_evict_last_do_not_survive_the_default_flush():
    """A kernel that marks its inputs evict_last asks L2 to give them up last: if the flush's plain reads could not
    displace them, the next call on the same inputs would find them warm. The decode GEMM with B's 73 MB loaded
    evict_last (the most L2 can hold of it kept) against the plain kernel, the same inputs every call, under the
    default flush: level, or the flush leaves a warm cache a kernel can ask for."""
    from ptxbench.tools.gpu.inprocess import in_process_worker
    from ptxbench.tools.gpu.timing import evaluation_flush
    from ptxbench.workloads.solutions.gemm_template import params_for, render

    kept = render(params_for(DECODE, l2_hints=True)).replace(B_STREAMED, B_KEPT)
    with in_process_worker() as state:
        sides, _keep = _decode_sides(state, [render(params_for(DECODE)), kept])
        ratio = _median_ratios(sides, evaluation_flush(state.limits.l2_bytes))[1]
    assert ratio > 0.97, ratio


class _Driver:
    """The four driver calls no_persisting_l2 makes, recorded; `fixed` is a share the context cannot change (MPS)."""

    class CUresult:
        CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED = "ok", "not supported"

    class CUlimit:
        CU_LIMIT_PERSISTING_L2_CACHE_SIZE = "persisting"

    def __init__(self, share: int = 0, fixed: bool = False, reset_ok: bool = True):
        self.share, self.fixed, self.reset_ok, self.calls = share, fixed, reset_ok, []

    def cuCtxSetLimit(self, limit, value):
        self.calls.append(("set", limit, value))
        if self.fixed:
            return (self.CUresult.CUDA_ERROR_NOT_SUPPORTED,)
        self.share = value
        return (self.CUresult.CUDA_SUCCESS,)

    def cuCtxGetLimit(self, limit):
        self.calls.append(("get", limit))
        return self.CUresult.CUDA_SUCCESS, self.share

    def cuCtxResetPersistingL2Cache(self):
        self.calls.append(("reset",))
        return (self.CUresult.CUDA_SUCCESS if self.reset_ok else self.CUresult.CUDA_ERROR_NOT_SUPPORTED,)


def test_every_timing_run_starts_with_no_l2_set_aside_for_persisting_lines():
    from ptxbench.tools.gpu.timing import no_persisting_l2

    cu = _Driver(share=8 << 20)  # a library left 8 MB set aside
    no_persisting_l2(cu)
    assert cu.share == 0 and cu.calls == [("set", "persisting", 0), ("get", "persisting"), ("reset",)]
    no_persisting_l2(_Driver(fixed=True, reset_ok=False))  # MIG: the share cannot be set and is off: fine
    with pytest.raises(RuntimeError, match="set aside for persisting accesses"):
        no_persisting_l2(_Driver(share=4 << 20, fixed=True))  # MPS with a share: timing would not be cold


def test_the_read_flush_buffer_is_zeros_and_a_write_into_it_is_caught():
    """Read, the flush buffer would outlive every call untouched, memory a kernel could keep a result in: it starts
    as zeros, each flush also asks whether it still is, and the run ends with the answer (FlushBuffer.check)."""
    from ptxbench.tools.gpu.timing import FlushBuffer
    from ptxbench.tools.gpu.verdict import Failed

    clean = FlushBuffer(L2Flush(1 << 16, "read"), device="cpu")
    for fill in range(3):
        clean.flush(fill)
    clean.check()
    stash = FlushBuffer(L2Flush(1 << 16, "read"), device="cpu")
    stash.flush(0)
    stash.data[1234] = 7  # between two calls: a kernel's write lands in the buffer
    stash.flush(1)
    with pytest.raises(Failed) as e:
        stash.check()
    assert e.value.status == "RUNTIME_ERROR" and e.value.runtime_error == "OUT_OF_BOUNDS_WRITE: L2 flush buffer"
    # a kernel that also found the answer cannot undo it: the flush that saw its stash added nothing, and the key it
    # would have added was never in device memory
    undone = FlushBuffer(L2Flush(1 << 16, "read"), device="cpu")
    undone.flush(0)
    before = undone.clean_keys.clone()
    undone.data[77] = 5  # call k leaves a result
    undone.flush(1)
    undone.data[77] = 0  # call k+1 takes it and puts back what it saw before
    undone.clean_keys.copy_(before)
    undone.flush(2)
    with pytest.raises(Failed):
        undone.check()
    written = FlushBuffer(L2Flush(1 << 16, "write"), device="cpu")
    written.data[5] = 9
    written.flush(3)  # the written flush replaces every word before each call: nothing outlives it
    assert bool((written.data == 3).all())
    written.check()


@pytest.mark.gpu
def test_a_write_into_the_flush_buffer_between_timed_calls_ends_the_run(monkeypatch):
    """Through time_sides itself: a call that writes into the read flush's buffer (here handed to it; a kernel would
    have to find it) is an out-of-bounds write when the run ends."""
    import torch

    from ptxbench.tools.gpu import timing
    from ptxbench.tools.gpu.verdict import Failed

    made = []
    real = timing.FlushBuffer

    def keep(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    monkeypatch.setattr(timing, "FlushBuffer", keep)
    one = torch.zeros(1, device="cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    timing.time_sides([timing.Side(lambda: one.add_(1.0))], flush=timing.evaluation_flush(l2), warmup=1, iters=3,
                      trials=1)
    with pytest.raises(Failed, match="L2 flush buffer"):
        timing.time_sides([timing.Side(lambda: made[-1].data[99].fill_(1))], flush=timing.evaluation_flush(l2),
                          warmup=1, iters=3, trials=1)
