"""Shared by the GEMM template's tests (test_gemm_solution.py, test_gemm_pingpong.py, test_gemm_streamk.py,
test_gemm_defer.py, test_gemm_narrow_tile.py): compiling a set of template points at once, the checks every point's
kernel must pass, a GPU runner of a compiled point (bench/gemm_reference_bench.py's Runner, outside the evaluator) and
a check of its result against torch."""
from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ptxbench.tools.compile import compile_source
from ptxbench.workloads.solutions import gemm_template as gt

ROOT = Path(__file__).resolve().parents[1]


def compile_points(variants: dict[str, dict], workload: str) -> dict:
    """name -> CompileResult of gt.render(GemmParams(**changes)), compiled in parallel."""
    def build(name):
        return name, compile_source(gt.render(gt.GemmParams(**variants[name])), "cuda", workload=workload)

    with ThreadPoolExecutor(max_workers=len(variants)) as pool:
        return dict(pool.map(build, variants))


def clean_kernel(result):
    """The template kernel of a compile that every point must give: compiled without warnings (C7515 serialised
    wgmma, C7508 setmaxnreg ignored would be warnings), HGMMA + UTMALDG, setmaxnreg dec + inc, no spills."""
    assert result.status == "ok", result.log[-2000:]
    assert not result.warnings, [str(w) for w in result.warnings]
    kernel = result.kernels[gt.KERNEL]
    ops = kernel.sass_opcodes
    assert ops.get("HGMMA", 0) > 0 and ops.get("UTMALDG", 0) > 0 and ops.get("USETMAXREG", 0) == 2
    assert kernel.spill_stores == 0 and kernel.spill_loads == 0
    return kernel


def gpu_runner(name: str, changes: dict, result):
    """(the bench module, a Runner of the compiled point) for a test against torch on the GPU."""
    import torch

    spec = importlib.util.spec_from_file_location("gemm_bench", ROOT / "bench" / "gemm_reference_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    source = gt.render(gt.GemmParams(**changes))
    return bench, bench.Runner(name, source, Path(result.cubin_path).read_bytes(), sms)


def check_against_torch(name: str, changes: dict, result, shape: tuple[int, int, int], seed: int, calls: int = 1):
    """Runs the compiled point `calls` times on random bf16 inputs of `shape` (a NaN-poisoned output each time, so every
    element must be written) and asserts each result matches torch (the bench's element rule, relative Frobenius
    error under 5e-3)."""
    import torch

    torch.manual_seed(seed)
    bench, runner = gpu_runner(name, changes, result)
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float().T
    for call in range(calls):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        runner.prepare({"A": a, "B": b, "C": c}, {"M": m, "N": n, "K": k})()
        torch.cuda.synchronize()
        verdict = bench.check(c, ref)
        assert verdict["ok"] and verdict["rel_fro"] < 5e-3, (call, verdict)
