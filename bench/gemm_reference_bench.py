"""Correctness and timing of rendered reference-GEMM variants against torch.matmul (cuBLAS).

Standalone on purpose (torch + cuda.bindings only, no ptxbench imports but tools/solution/expr.py), so it
measures the kernels without the evaluator. Two steps:
  python3 bench/gemm_reference_bench.py build            # here: render + nvcc/ptxas -> bench/build_gemm/
  python3 bench/gemm_reference_bench.py run [--iters 20]  # on the GPU machine (carry bench/build_gemm)
Each variant's launch plan is read from its solution file and interpreted like the harness does:
grid/smem expressions, TMA maps encoded with cuTensorMapEncodeTiled and passed by value, scratch buffers
(poisoned once when allocated; those with zero = true zeroed before every launch, as the harness does inside
its timed call).
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import re
import statistics
import subprocess
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "bench" / "build_gemm"

POISON_BYTE = 0x5A  # the fill of an integer scratch buffer until the kernel writes it
POISON_WORD = int.from_bytes(bytes([POISON_BYTE]) * 8, "little")  # an int64 slot never written

# name -> template parameters (differences from default_params())
VARIANTS: dict[str, dict] = {
    "default": {},
    "s3": dict(stages=3),
    "direct_s4": dict(epilogue="direct"),
    "pr24": dict(producer_regs=24),
    "group4": dict(group_m=4),
    "group16": dict(group_m=16),
    "cluster2": dict(cluster_m=2),
    "cluster2_np": dict(cluster_m=2, persistent=False),
    "cluster2_group16": dict(cluster_m=2, group_m=16),
    "cluster2_cap128": dict(cluster_m=2, max_ctas=128),
    "cluster2_cap120": dict(cluster_m=2, max_ctas=120),
    "nonpersistent": dict(persistent=False),
    "bn192": dict(bn=192),
    "bm256_bn128_s3": dict(bm=256, bn=128, stages=3),
    "bm192_c3": dict(bm=192, bn=128, consumers=3, producer_regs=24),
    "streamk": dict(tail="streamk"),  # the tail's k-blocks split over all CTAs (scratch: workspace + tickets)
    "streamk_stm": dict(tail="streamk", stmatrix=True),
}
SHAPES = {  # name -> (M, N, K); "main" is timed
    "smoke": (256, 256, 512),
    "ragged": (200, 296, 328),
    "m64": (64, 7168, 5120),
    "m128": (128, 7168, 5120),
    "main": (8192, 7168, 5120),
}


def build(names: list[str]) -> None:
    from ptxbench.workloads.solutions.gemm_template import GemmParams, render, validate

    BUILD.mkdir(parents=True, exist_ok=True)
    for name in names:
        params = GemmParams(**VARIANTS[name])
        if validate(params):
            print(f"{name}: invalid: {validate(params)}")
            continue
        compile_cu(BUILD / f"{name}.cu", render(params))


def compile_cu(cu: Path, source: str) -> None:
    """Writes `source` to `cu` and builds cu.ptx (nvcc) and cu.cubin (ptxas, sm_90a); prints registers and spills."""
    cu.write_text(source)
    ptx, cubin = cu.with_suffix(".ptx"), cu.with_suffix(".cubin")
    subprocess.run(["nvcc", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", "-I", str(ROOT / "prompts/include"),
                    str(cu), "-o", str(ptx)], check=True)
    log = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(ptx), "-o", str(cubin)], check=True,
                         capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", log).group(1)
    spills = re.search(r"(\d+) bytes spill stores", log).group(1)
    print(f"{cu.stem}: {regs} registers, {spills} bytes spilled")


def read_plan(source: str) -> dict:
    block = re.search(r"/\*\s*ptxbench\b(.*?)\*/", source, re.S).group(1)
    return tomllib.loads(block)


def _load_expr():
    spec = importlib.util.spec_from_file_location("plan_expr", ROOT / "tools" / "solution" / "expr.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Runner:
    """Loads one variant's cubin and launches it per its plan, every launch in order (the harness's job, in
    miniature)."""

    def __init__(self, name: str, source: str, cubin: bytes, num_sms: int):
        import torch
        from cuda.bindings import driver as cu

        torch.zeros(1, device="cuda")  # makes torch's (primary) context current, which the driver calls use
        self.cu, self.name, self.num_sms = cu, name, num_sms
        self.plan = read_plan(source)
        self.launches = self.plan["launch"]
        self.module = self._check(cu.cuModuleLoadData(cubin))
        self.funcs = [self._check(cu.cuModuleGetFunction(self.module, L["kernel"].encode())) for L in self.launches]
        self.expr = _load_expr()
        self.scratch: dict = {}  # the plan's scratch buffers, by name (allocated by the first prepare())

    def _check(self, result):
        err, *rest = result
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{self.name}: {err}")
        return rest[0] if len(rest) == 1 else rest

    def _scratch(self, name: str, ev):
        """The plan's scratch buffer `name` (allocated on first use, kept for later prepare() calls of the same
        shape; NaN / 0x5A bytes until the kernel or a zero fill writes it)."""
        import torch
        spec = self.plan["scratch"][name]
        shape = [ev(d) for d in spec["shape"]]
        buf = self.scratch.get(name)
        if buf is None or list(buf.shape) != shape:
            dtype = getattr(torch, spec["dtype"])
            buf = torch.empty(shape, dtype=dtype, device="cuda")
            buf.fill_(float("nan")) if dtype.is_floating_point else buf.view(torch.uint8).fill_(POISON_BYTE)
            self.scratch[name] = buf
        return buf

    def _tmap(self, spec: dict, tensors: dict, syms: dict):
        cu = self.cu
        t = tensors[spec["tensor"]]
        dims = list(reversed(t.shape))
        strides = [t.stride(i) * t.element_size() for i in range(t.dim() - 2, -1, -1)]
        box = [self.expr.evaluate_int(b, syms) for b in spec["box"]]
        swz = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}[spec.get("swizzle", "none")]
        l2 = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}[spec.get("l2_promotion", "none")]
        return self._check(cu.cuTensorMapEncodeTiled(
            cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, len(dims), t.data_ptr(),
            [cu.cuuint64_t(d) for d in dims], [cu.cuuint64_t(s) for s in strides],
            [cu.cuuint32_t(b) for b in box], [cu.cuuint32_t(1)] * len(dims),
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
            getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))

    def prepare(self, tensors: dict, syms: dict):
        """Returns a zero-argument launcher for these tensors: the zeroed scratch filled, then every launch."""
        syms = dict(syms, num_sms=self.num_sms)
        ev = lambda e: self.expr.evaluate_int(e, syms)  # noqa: E731
        maps = {n: self._tmap(s, tensors, syms) for n, s in self.plan.get("tmap", {}).items()}
        calls = [self._config(L, f, tensors, ev, maps) for L, f in zip(self.launches, self.funcs)]
        zeroed = [self.scratch[n] for n, spec in self.plan.get("scratch", {}).items() if spec.get("zero")]
        cu = self.cu

        def launch():
            _ = maps  # the tensor maps the arguments point at, kept alive by the closure
            for buf in zeroed:
                buf.zero_()
            for cfg, func, args in calls:
                self._check((cu.cuLaunchKernelEx(cfg, func, args, 0)[0], None))
        return launch

    def _config(self, L: dict, func, tensors: dict, ev, maps: dict):
        """(launch config, function, kernel arguments) of one launch of the plan."""
        cu = self.cu
        values, types = [], []
        for a in L["args"]:
            if a.startswith("tmap:"):
                values.append(maps[a[5:]]); types.append(None)
            elif a.startswith("i32:"):
                values.append(ev(a[4:])); types.append(ctypes.c_int)
            elif a.startswith("scratch:"):
                values.append(self._scratch(a[8:], ev).data_ptr()); types.append(ctypes.c_void_p)
            else:
                values.append(tensors[a].data_ptr()); types.append(ctypes.c_void_p)
        smem = ev(L.get("smem", 0))
        self._check(cu.cuFuncSetAttribute(func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (ev(g) for g in L["grid"])
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (ev(b) for b in L["block"])
        cfg.sharedMemBytes = smem
        import torch
        cfg.hStream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
        attrs = []
        if "cluster" in L:
            at = cu.CUlaunchAttribute()
            at.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = (ev(c) for c in L["cluster"])
            attrs.append(at)
        cfg.attrs, cfg.numAttrs = attrs, len(attrs)
        return cfg, func, (tuple(values), tuple(types))


def check(c, ref) -> dict:
    import torch
    out = c.float()
    err = (out - ref).abs()
    bad = (err > 1e-2) & (err > 1e-2 * ref.abs())
    bad |= ~torch.isfinite(out)
    return {"ok": int(bad.sum()) == 0, "bad": int(bad.sum()), "max_abs": float(err.nan_to_num(1e9).max()),
            "rel_fro": float((out - ref).nan_to_num(1e9).norm() / ref.norm())}


def run(names: list[str], iters: int, shapes: list[str]) -> None:
    import torch

    torch.manual_seed(0)
    torch.cuda.init()
    _ = torch.zeros(1, device="cuda")
    dev = torch.cuda.get_device_properties(0)
    runners = {}
    for n in names:
        if (BUILD / f"{n}.cubin").exists():
            runners[n] = Runner(n, (BUILD / f"{n}.cu").read_text(), (BUILD / f"{n}.cubin").read_bytes(),
                                dev.multi_processor_count)
    results: dict = {"device": dev.name, "correct": {}, "timing": {}}
    for sname in shapes:
        M, N, K = SHAPES[sname]
        A = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        B = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        ref = A.float() @ B.float().T
        for n, r in runners.items():
            C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            try:
                r.prepare({"A": A, "B": B, "C": C}, {"M": M, "N": N, "K": K})()
                torch.cuda.synchronize()
                results["correct"][f"{n}@{sname}"] = check(C, ref)
            except Exception as exc:  # a broken variant is a result here
                results["correct"][f"{n}@{sname}"] = {"ok": False, "error": str(exc)[:200]}
                torch.cuda.synchronize()
            print(sname, n, results["correct"][f"{n}@{sname}"], flush=True)
        if sname != "main":
            continue
        flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
        C = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
        fns = {"cublas": lambda: torch.matmul(A, B.T, out=C)}
        fns.update({n: r.prepare({"A": A, "B": B, "C": C}, {"M": M, "N": N, "K": K})
                    for n, r in runners.items() if results["correct"][f"{n}@main"].get("ok")})
        times = interleaved_times(fns, iters, flush)
        flops = 2 * M * N * K
        base = statistics.median(times["cublas"])
        for n, ts in times.items():
            med = statistics.median(ts)
            q = statistics.quantiles(ts, n=4)
            results["timing"][n] = {"median_ms": med, "q1_ms": q[0], "q3_ms": q[2],
                                    "tflops": flops / med / 1e9, "speedup_vs_cublas": base / med}
    print(json.dumps(results, indent=1))
    print("\n| variant | median ms | IQR ms | TFLOP/s | vs cuBLAS |\n|---|---|---|---|---|")
    for n, t in sorted(results["timing"].items(), key=lambda kv: kv[1]["median_ms"]):
        print(f"| {n} | {t['median_ms']:.3f} | {t['q1_ms']:.3f}-{t['q3_ms']:.3f} | {t['tflops']:.0f} | {t['speedup_vs_cublas']:.3f} |")


FLUSH_MODES = ("write", "read")


def interleaved_times(fns: dict, iters: int, flush, warmup: int = 5, gap_s: float = 0.0,
                      flush_mode: str = "write") -> dict[str, list[float]]:
    """name -> `iters` times in ms (CUDA events) of each zero-argument launcher, interleaved: every round times each
    once, after zeroing `flush` (a buffer larger than L2, so every call starts with a cold L2); `warmup` rounds first.
    `flush_mode` "read" sums the buffer instead: L2 is as cold, but holds clean lines, so the timed call evicts
    without writing back (zeroing leaves L2 full of dirty lines, whose write-back the call pays: `ptxbench eval`'s
    protocol writes its flush buffer, tools/gpu/timing.py).
    `gap_s`: the GPU left idle that long after each call. Back to back, the main GEMM's kernels hold the H200 at its
    700 W limit and about 1,490 MHz, and a variant that draws less power gets a higher clock (gemm_sweep.md rounds
    9-10); with gaps the clock stays at 1,980 MHz, as in `ptxbench eval`."""
    import torch

    times: dict[str, list[float]] = {n: [] for n in fns}
    if flush_mode not in FLUSH_MODES:
        raise ValueError(f"flush_mode {flush_mode!r}: expected one of {FLUSH_MODES}")
    words = flush.view(torch.int32)
    for it in range(iters + warmup):
        for n, fn in fns.items():
            if flush_mode == "read":
                words.sum()
            else:
                flush.zero_()
            if gap_s:  # after an idle gap, keep the GPU busy (~100 us) while the host dispatches the launcher, so
                torch.cuda._sleep(200_000)  # its dispatch (torch.matmul's is the longest) is not inside the events
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record()
            e.synchronize()
            if it >= warmup:
                times[n].append(s.elapsed_time(e))
            if gap_s:
                time.sleep(gap_s)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["build", "run"])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    names = a.variants.split(",")
    build(names) if a.step == "build" else run(names, a.iters, a.shapes.split(","))


if __name__ == "__main__":
    main()
