"""Regenerate the real Nsight Compute and compute-sanitizer outputs the profile tests parse.

Standalone on a GPU machine (cuda.bindings, nvtx or torch for the NVTX range; no ptxbench import):
    python3 tests/data/ncu/capture.py drive OUTDIR     # profiles and sanitizes every case into OUTDIR
    python3 tests/data/ncu/capture.py run CASE [--lineinfo]   # one launch inside the NVTX range 'ptxbench'
The kernels are the PTX files in tests/data/profile/.
The source pages (`--page source --print-source sass`) carry per-instruction stall samples; the profile
joins them by position with the compile's line of each instruction, so no line info is needed in the
profiled cubin. To record the reference GEMM's pages for the feedback regression tests (issue 12) on the
H200 (CUBIN: `ptxbench compile workloads/solutions/gemm_bf16_m8192_n7168_k5120.cu --json` -> cubin_path):
    ncu --clock-control none --nvtx --nvtx-include ptxbench/ --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section ComputeWorkloadAnalysis --section SourceCounters -f -o gemm \
        python3 -m ptxbench.tools.profile.replay --workload gemm_bf16_m8192_n7168_k5120 \
        --source workloads/solutions/gemm_bf16_m8192_n7168_k5120.cu --cubin CUBIN
    for p in raw details source; do ncu --import gemm.ncu-rep --csv --page $p --print-metric-instances details \
        --print-details all --print-source sass > gemm.$p.csv; done
"""
from __future__ import annotations

import ctypes
import glob
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "profile"
REPO = HERE.parents[2]
CUDA_BIN = "/usr/local/cuda/bin"

SECTIONS = ["SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis",
            "ComputeWorkloadAnalysis", "InstructionStats", "SourceCounters"]
METRICS = ["sass__inst_executed_per_opcode", "sass__thread_inst_executed_true_per_opcode",
           "sm__inst_executed_pipe_tensor_op_gmma.sum", "smsp__sass_inst_executed_op_tma_ld.sum",
           "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum",
           "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"]


# ----------------------------------------------------------------------------- one launch
def _check(result):
    from cuda.bindings import driver as cu
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err}")
    return rest[0] if len(rest) == 1 else rest


def _nvtx():
    try:
        import nvtx
        return nvtx.push_range, nvtx.pop_range
    except ImportError:
        import torch
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


def _cubin(name: str, lineinfo: bool) -> bytes:
    src = KERNELS / f"{name}.ptx"
    text = src.read_text()
    if lineinfo:
        spec = importlib.util.spec_from_file_location("lineinfo", REPO / "tools/profile/lineinfo.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        text = mod.annotate_ptx(text, src.name)
    tmp = Path(f"/tmp/capture_{name}{'_li' if lineinfo else ''}")
    tmp.with_suffix(".ptx").write_text(text)
    cmd = [f"{CUDA_BIN}/ptxas", "-arch=sm_90a", str(tmp.with_suffix(".ptx")), "-o", str(tmp.with_suffix(".cubin"))]
    subprocess.run(cmd + (["-lineinfo"] if lineinfo else []), check=True)
    return tmp.with_suffix(".cubin").read_bytes()


def run_case(case: str, lineinfo: bool) -> None:
    from cuda.bindings import driver as cu
    _check(cu.cuInit(0))
    dev = _check(cu.cuDeviceGet(0))
    ctx = _check(cu.cuDevicePrimaryCtxRetain(dev))
    _check(cu.cuCtxSetCurrent(ctx))

    def alloc(nbytes: int, fill: int | None = 0):
        ptr = _check(cu.cuMemAlloc(nbytes))
        if fill is not None:
            _check(cu.cuMemsetD8(ptr, fill, nbytes))
        return ptr

    u32, ptr_t = ctypes.c_uint32, ctypes.c_void_p
    kernel = {"gated_live": "gated_mma", "gated_dead": "gated_mma", "fma": "fma_loop", "stream": "stream_copy",
              "race": "smem_race", "oob": "oob_write", "uninit": "stream_copy"}[case]
    if kernel == "gated_mma":
        src = alloc(64 * 64 * 2, 0x3C)
        out = alloc(8 * 128 * 16)
        u64, u32c = cu.cuuint64_t, cu.cuuint32_t
        tmap = _check(cu.cuTensorMapEncodeTiled(
            cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, src, [u64(64), u64(64)], [u64(128)],
            [u32c(64), u32c(64)], [u32c(1), u32c(1)], cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE, cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
        launch = ((8, 1, 1), (128, 1, 1), ((tmap, int(out), 1 if case == "gated_live" else 0, 10), (None, ptr_t, u32, u32)))
    elif kernel == "fma_loop":
        n = 1 << 20
        launch = ((n // 256, 1, 1), (256, 1, 1), ((int(alloc(4 * n)), n, 256), (ptr_t, u32, u32)))
    elif kernel == "stream_copy":
        n4 = (1 << 24) if case == "stream" else 1024
        src = alloc(16 * n4, 0 if case == "stream" else None)
        launch = ((132 * 8 if case == "stream" else 4, 1, 1), (256, 1, 1),
                  ((int(alloc(16 * n4)), int(src), n4), (ptr_t, ptr_t, ctypes.c_uint64)))
    elif kernel == "smem_race":
        launch = ((2, 1, 1), (256, 1, 1), ((int(alloc(2 * 256 * 4)),), (ptr_t,)))
    else:  # oob_write: 1000 floats, 1024 threads
        launch = ((4, 1, 1), (256, 1, 1), ((int(alloc(4 * 1000)), 1000), (ptr_t, u32)))

    module = _check(cu.cuModuleLoadData(_cubin(kernel, lineinfo)))
    func = _check(cu.cuModuleGetFunction(module, kernel.encode()))
    (gx, gy, gz), (bx, by, bz), params = launch
    push, pop = _nvtx()
    push("ptxbench")
    _check(cu.cuLaunchKernel(func, gx, gy, gz, bx, by, bz, 0, 0, params, 0))
    err = cu.cuCtxSynchronize()[0]
    pop()
    print(f"case {case}: {kernel} grid {launch[0]} block {launch[1]} -> {err}")


# ----------------------------------------------------------------------------- the driver
def _run(cmd: list[str], log: Path, timeout: float = 120) -> tuple[int, float]:
    t0 = time.time()
    with log.open("w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = -9
    return rc, time.time() - t0


def drive(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ncu, san = f"{CUDA_BIN}/ncu", f"{CUDA_BIN}/compute-sanitizer"
    me = [sys.executable, str(Path(__file__).resolve()), "run"]
    times: dict[str, object] = {}
    for tool in (ncu, san):
        subprocess.run(f"{tool} --version > {out}/{Path(tool).name}.version.txt 2>&1", shell=True)
    subprocess.run(f"{ncu} --list-sections > {out}/sections.txt 2>&1", shell=True)
    subprocess.run(f"{ncu} --query-metrics --chip gh100 > {out}/query_metrics_gh100.txt 2>&1", shell=True)
    subprocess.run(f"{san} --help > {out}/sanitizer_help.txt 2>&1; {ncu} --help > {out}/ncu_help.txt 2>&1", shell=True)
    base = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", "ptxbench/", "-f"]
    full = [x for s in SECTIONS for x in ("--section", s)] + ["--metrics", ",".join(METRICS)]
    for case in ("gated_live", "gated_dead", "fma", "stream"):
        rep = out / f"{case}"
        times[f"ncu_full_{case}"] = _run(base + full + ["-o", str(rep)] + me + [case], out / f"{case}.ncu.log")
        imp = [ncu, "--import", f"{rep}.ncu-rep", "--csv"]
        times[f"import_raw_{case}"] = _run(imp + ["--page", "raw", "--print-metric-instances", "details"], out / f"{case}.raw.csv")
        _run(imp + ["--page", "details", "--print-details", "all"], out / f"{case}.details.csv")
        _run(imp + ["--page", "source", "--print-source", "sass"], out / f"{case}.source.csv")
    # the verdict alone (no sections): how much cheaper is it?
    times["ncu_verdict_only_gated_live"] = _run(base + ["--metrics", ",".join(METRICS[:5]), "--csv", "--page", "raw",
                                                        "--print-metric-instances", "details", "--log-file",
                                                        str(out / "verdict_only.csv")] + me + ["gated_live"],
                                                 out / "verdict_only.log")
    # ncu's Python report module
    extras = sorted(glob.glob("/usr/local/cuda*/nsight-compute*/extras/python")) + sorted(
        glob.glob("/opt/nvidia/nsight-compute/*/extras/python"))
    times["ncu_report_paths"] = extras
    if extras:
        code = (f"import sys, json; sys.path.insert(0, {extras[-1]!r}); import ncu_report as r\n"
                f"ctx = r.load_report({str(out / 'gated_live.ncu-rep')!r}); a = ctx.range_by_idx(0).action_by_idx(0)\n"
                "d = {'name': a.name(), 'metrics': sorted(a.metric_names())[:4000],"
                " 'rules': a.rule_results_as_dicts() if hasattr(a, 'rule_results_as_dicts') else None}\n"
                "print(json.dumps(d, default=str)[:3000000])\n")
        times["ncu_report_gated_live"] = _run([sys.executable, "-c", code], out / "ncu_report_gated_live.json")
    for tool, case, li in (("memcheck", "oob", True), ("racecheck", "race", True), ("synccheck", "race", False),
                           ("initcheck", "uninit", True), ("memcheck", "gated_live", False)):
        cmd = [san, "--tool", tool, "--error-exitcode", "86"] + me + [case] + (["--lineinfo"] if li else [])
        times[f"sanitizer_{tool}_{case}"] = _run(cmd, out / f"san_{tool}_{case}.txt")
    (out / "times.json").write_text(json.dumps(times, indent=1))
    print(json.dumps(times, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run_case(sys.argv[2], "--lineinfo" in sys.argv)
    else:
        drive(Path(sys.argv[2]))
