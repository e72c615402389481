"""On the GPU (pytest -m gpu): the runtime verdict, the profile and the sanitizer on real kernels.

Done-when of the profiling issue: the reference GEMM executes wgmma and TMA with the counts its
plan implies; wgmma behind a never-taken branch is present_not_executed; a plain-FMA kernel is
absent; a memory-bound candidate is named memory-bound; memcheck catches the fault corpus's
out-of-bounds write and racecheck a shared-memory race; a GEMM profile takes under 30 s.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "tests" / "data" / "profile" / "solutions"
SMOKE = "smoke_gemm_bf16_m256_n256_k512"
GEMM = "gemm_bf16_m8192_n7168_k5120"


def compiled(workload: str, path: Path):
    from ptxbench.tools.solution.language import detect_language
    from ptxbench.tools.compile import compile_source

    text = path.read_text()
    cr = compile_source(text, detect_language(text, path), "sm_90a", workload)
    assert cr.status == "ok", [e.message for e in cr.errors]
    return text, cr


def profile(workload: str, path: Path, **kw):
    from ptxbench.tools.profile import profile_candidate

    text, cr = compiled(workload, path)
    out = profile_candidate(workload, text, cr.cubin_path, compile_result=cr, **kw)
    assert out.ok, out.error
    return out


def test_reference_gemm_executes_wgmma_and_tma_with_the_counts_of_its_plan():
    from ptxbench.workloads.registry import get_workload
    from ptxbench.workloads.solutions.gemm_template import default_params

    wl = get_workload(GEMM)
    M, N, K = (int(wl.symbols[s]) for s in "MNK")
    p = default_params()
    start = time.perf_counter()
    out = profile(GEMM, ROOT / "workloads" / "solutions" / f"{GEMM}.cu")
    seconds = time.perf_counter() - start
    wgmma, tma = out.targets_runtime["wgmma"], out.targets_runtime["tma"]
    assert wgmma.verdict == "executed" and tma.verdict == "executed", (wgmma.reason, tma.reason)
    # each m64n{bn}k16 wgmma is one instruction in each of the 4 warps of a warpgroup
    hgmma = 4 * (M // 64) * (N // p.bn) * (K // 16)
    assert wgmma.executed_warp_insts == hgmma
    assert wgmma.counter_values["sm__inst_executed_pipe_tensor_op_gmma.sum"] == hgmma
    assert wgmma.counter_values["sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum"] == 2 * M * N * K
    assert wgmma.work_share == 1.0 and tma.work_share > 1.0  # the whole GEMM on the tensor cores; tiles re-read
    # one A box and one B box per 64-wide K chunk per tile, issued by one producer thread
    loads = (M // p.bm) * (N // p.bn) * (K // p.bk) * (p.bk // 64) * 2
    assert tma.counter_values["smsp__sass_inst_executed_op_tma_ld.sum"] == loads
    assert tma.counter_values["l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"] == \
        (M // p.bm) * (N // p.bn) * (p.bm + p.bn) * K * 2
    assert tma.executed_thread_insts_true >= loads  # + the TMA stores of the epilogue
    assert out.feedback and seconds < 30, f"profile took {seconds:.1f} s"
    print(f"\nGEMM profile: {seconds:.1f} s; HGMMA {wgmma.executed_warp_insts:,}; UTMALDG {loads:,}\n{out.feedback}")


def test_wgmma_behind_a_never_taken_branch_is_present_not_executed():
    out = profile(SMOKE, SOLUTIONS / "wgmma_dead_branch.ptx")
    assert out.targets_runtime["wgmma"].verdict == "present_not_executed"
    assert out.targets_runtime["tma"].verdict == "present_not_executed"
    # the verdict level (no per-opcode pass: the hardware counters decide) agrees on both kernels
    dead = profile(SMOKE, SOLUTIONS / "wgmma_dead_branch.ptx", full=False)
    assert dead.targets_runtime["wgmma"].verdict == "present_not_executed", dead.targets_runtime["wgmma"].reason
    assert dead.targets_runtime["tma"].verdict == "present_not_executed", dead.targets_runtime["tma"].reason
    live = profile(SMOKE, SOLUTIONS / "wgmma_live.ptx", full=False)
    # the live probe runs its wgmma and its TMA loads, but as a token: 80 m64n8k16 wgmma are 2% of the smoke GEMM's
    # FLOPs, 8 boxes of 64 x 64 an eighth of its inputs' bytes
    assert live.targets_runtime["wgmma"].verdict == "token", live.targets_runtime["wgmma"].reason
    assert live.targets_runtime["wgmma"].work_share == pytest.approx(80 * 64 * 8 * 16 * 2 / (2 * 256 * 256 * 512))
    assert live.targets_runtime["tma"].verdict == "token"
    assert live.targets_runtime["tma"].work_share == pytest.approx(8 * 64 * 64 * 2 / (2 * 2 * 256 * 512))
    assert live.targets_runtime["wgmma"].counter_values["sm__inst_executed_pipe_tensor_op_gmma.sum"] == 8 * 4 * 10
    assert live.targets_runtime["tma"].counter_values["smsp__sass_inst_executed_op_tma_ld.sum"] == 8


def test_wgmma_beside_the_work_done_on_the_cuda_cores_is_a_decoy():
    """wgmma_decoy.ptx does the smoke GEMM's FLOPs with FFMA and runs wgmma beside it, 59% of those FLOPs on one tile:
    past the token share, so only the FFMA count tells it. Also the counters' meaning on this GPU: one FFMA thread
    instruction per fma.rn.f32 a thread executes (a wrong name would fail the whole pass)."""
    out = profile(SMOKE, SOLUTIONS / "wgmma_decoy.ptx", full=False)
    wgmma = out.targets_runtime["wgmma"]
    ffma = wgmma.counter_values["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"]
    assert ffma == 256 * 256 // 2 * 256 * 4  # threads x iterations x FFMA per iteration
    assert wgmma.work_share == pytest.approx(8 * 300 * 64 * 8 * 16 * 2 / (2 * 256 * 256 * 512))
    assert wgmma.verdict == "token" and "decoy" in wgmma.reason, wgmma.reason
    assert wgmma.elsewhere_share >= 1.0
    ref = profile(GEMM, ROOT / "workloads" / "solutions" / f"{GEMM}.cu", full=False)  # the honest GEMM: none elsewhere
    assert ref.targets_runtime["wgmma"].verdict == "executed" and ref.targets_runtime["wgmma"].elsewhere_share < 0.01


def test_tma_beside_the_work_done_from_plain_loads_is_a_decoy():
    """tma_decoy.cu computes the smoke GEMM from plain loads and TMA-loads every box of A and B once beside it: TMA's
    work share is exactly 1 (past the token share), so only the plain loads' bytes tell it; the honest GEMM reads
    nothing that way. Also that ncu collects cp.async's sector counter (a rejected name is dropped, then missing)."""
    out = profile(SMOKE, SOLUTIONS / "tma_decoy.cu", full=False)
    tma = out.targets_runtime["tma"]
    assert tma.counter_values["l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum"] == 2 * 2 * 256 * 512
    assert tma.work_share == 1.0
    assert tma.counter_values["sm__sass_l1tex_t_sectors_pipe_lsu_mem_global_op_ldgsts.sum"] == 0
    assert tma.verdict == "token" and "decoy" in tma.reason, tma.reason
    assert tma.elsewhere_share >= 100  # every thread reads a row of A and of B: at least 256x the inputs' bytes
    print(f"\nTMA decoy: elsewhere share {tma.elsewhere_share:.4g}; {tma.reason}")
    ref = profile(GEMM, ROOT / "workloads" / "solutions" / f"{GEMM}.cu", full=False)
    assert ref.targets_runtime["tma"].verdict == "executed" and ref.targets_runtime["tma"].elsewhere_share < 0.01


def test_plain_fma_kernel_is_absent():
    out = profile(SMOKE, SOLUTIONS / "fma_only.ptx")
    assert out.targets_runtime["wgmma"].verdict == "absent" and out.targets_runtime["tma"].verdict == "absent"


def test_memory_bound_candidate_is_named_memory_bound():
    out = profile(GEMM, SOLUTIONS / "memory_bound.ptx")
    assert out.summary.main_kernel().bottleneck == "memory"
    lines = out.feedback.splitlines()
    assert lines[0].startswith("Where it stands:")  # headroom first, then Nsight's summary
    assert any("memory-bound" in line for line in lines[:3] if line.startswith("Nsight Compute"))


def test_memcheck_catches_the_fault_corpus_out_of_bounds_write():
    from ptxbench.tools.sanitize import sanitize_candidate

    text, cr = compiled(SMOKE, ROOT / "workloads" / "solutions" / "faults" / "oob_write.cu")
    out = sanitize_candidate(SMOKE, text, language="cuda", cubin_path=cr.cubin_path, tools=["memcheck"])
    writes = [f for f in out.findings if f.kind == "Invalid __global__ write"]
    assert writes and writes[0].kernel == "gemm", out.findings
    assert writes[0].ptx_line is not None  # nvcc -lineinfo: the line of the .cu solution
    print("\n" + out.feedback)


def test_racecheck_catches_a_shared_memory_race_at_its_ptx_lines():
    from ptxbench.tools.sanitize import sanitize_candidate

    path = SOLUTIONS / "smem_race.ptx"
    out = sanitize_candidate(SMOKE, path.read_text(), language="ptx", tools=["racecheck", "synccheck"])
    (race,) = [f for f in out.findings if f.tool == "racecheck"]
    assert race.kernel == "smem_race" and path.read_text().splitlines()[race.ptx_line - 1].strip().startswith("st.shared")
    assert out.errors_reported["synccheck"] == 0
    print("\n" + out.feedback)


def test_the_verdict_holds_the_gpu_only_while_the_replay_runs():
    """Through LocalEvaluator: a passing GEMM gets its verdict with the GPU held for a fraction of the ncu run."""
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

    source = (ROOT / "workloads" / "solutions" / f"{GEMM}.cu").read_text()
    ev = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=0)))
    try:
        r = ev.evaluate(GEMM, source, EvalOptions())
    finally:
        ev.close()
    assert r.status == "PASSED" and r.profile_level == "verdict", r.message
    assert all(t.verdict == "executed" for t in r.targets_runtime.values()), r.targets_runtime
    held, whole = r.seconds["profile.gpu_held"], r.seconds["profile"]
    assert held < whole / 2, r.seconds
    # the profiled call's output checked against the evaluation's verified sketch: no reference computed meanwhile
    assert r.profile["output_passed"] is True and r.profile["output_method"] == "sketch", r.profile
    assert r.profile["output_judge_s"] < 1.0, r.profile["output_judge_s"]
    assert "not taken this turn" in r.feedback
    print(f"\nverdict: ncu run {whole:.2f} s, GPU held {held:.2f} s, waited {r.seconds['profile.gpu_wait']:.2f} s")


def test_a_kernel_that_behaves_otherwise_under_the_profiler_gets_no_target_credit():
    """profile_gap_tma.cu tells the profiled call by the time between its two launches (ncu profiles each on its own,
    milliseconds apart; no replay can hide that): evaluated, it computes the smoke GEMM from plain loads and never runs
    TMA; profiled, it sweeps A and B through TMA and leaves C unwritten. The replay judges its own output by the
    evaluation's rule, so the sweep's counters are not credited: the evaluation passes, TMA is not `executed`."""
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

    ev = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=0)))
    try:
        r = ev.evaluate(SMOKE, (SOLUTIONS / "profile_gap_tma.cu").read_text(), EvalOptions())
    finally:
        ev.close()
    assert r.status == "PASSED" and r.profile_level == "verdict", r.message
    assert r.profile["output_passed"] is False and r.profile["output_method"] == "sketch", r.profile
    assert r.targets_runtime["tma"].verdict == "unknown" and "not credited" in r.targets_runtime["tma"].reason
    assert r.target_executed is False and "profile_output_wrong" in r.timing.flags
    # the counters themselves show what the profiled call did: the sweep's TMA loads
    assert r.targets_runtime["tma"].counter_values.get("smsp__sass_inst_executed_op_tma_ld.sum", 0) > 0, r.targets_runtime


def test_the_profiled_calls_output_is_judged(tmp_path):
    """The reference GEMM's profiled call computes the GEMM (passed); a probe that computes nothing does not (and keeps
    the verdict its counters give: only a passing evaluation loses its credit)."""
    from ptxbench.agent.models.builtin import reference_source

    reference = tmp_path / "reference.cu"
    reference.write_text(reference_source(SMOKE))
    good = profile(SMOKE, reference, full=False)
    assert good.summary.output_passed is True and good.summary.output_status == "PASSED", good.summary.output_note
    probe = profile(SMOKE, SOLUTIONS / "wgmma_live.ptx", full=False)
    assert probe.summary.output_passed is False and probe.summary.output_status.startswith("INCORRECT"), probe.summary
    assert probe.targets_runtime["wgmma"].verdict == "token"


def test_the_profiled_call_draws_the_evaluations_input_distribution():
    """Under --dist spiky the replay drew normal inputs, so an honest kernel's profiled output missed set 0's verified
    sketch (of spiky inputs) and lost its target credit."""
    from ptxbench.agent.models.builtin import reference_source
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

    ev = LocalEvaluator(GpuPool(PoolConfig(devices=[0], spares=0)))
    try:
        r = ev.evaluate(SMOKE, reference_source(SMOKE), EvalOptions(dist="spiky"))
    finally:
        ev.close()
    assert r.status == "PASSED" and r.profile_level == "verdict", r.message
    assert r.profile["output_passed"] is True and r.profile["output_method"] == "sketch", r.profile
    assert r.target_executed is True, r.targets_runtime


def test_an_honest_multi_launch_plan_reads_the_same_work_back_to_back(tmp_path):
    """The range check (tools/profile/range_check.py) on the attention backward's reference, three launches
    (preprocessing, the main kernel, dQ's conversion): under range replay, the launches back to back as when timed,
    wgmma's operations and TMA's bytes read what the kernel replay summed launch by launch, and both stay credited."""
    from ptxbench.agent.models.builtin import reference_source

    path = tmp_path / "bwd.cu"
    path.write_text(reference_source("mha_bwd_d128"))
    out = profile("mha_bwd_d128", path, full=False)
    rc = out.range_check
    assert rc is not None and rc.ok, rc
    print(f"\nrange check: {rc.launches} launches, range {rc.range_us} us, {rc.seconds} s; "
          + ", ".join(f"{f}: {rc.range_values[f]:,.0f} / {rc.kernel_sums[f]:,.0f}" for f in rc.counters))
    assert rc.launches == 3 and set(rc.counters) == {"wgmma", "tma"} and rc.short == []
    for family in rc.counters:
        assert rc.share(family) == pytest.approx(1.0, rel=0.01), (family, rc)
    assert {t.verdict for t in out.targets_runtime.values()} == {"executed"}
