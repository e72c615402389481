"""No-GPU mode reads the compiled module's kernels: a launch of a kernel the source hides from the compiler (`#if 0`)
or only spells in a string passes the source's scan, and only the worker's cuModuleGetFunction refused it; compile-only
runs called it COMPILED. Real nvcc and ptxas, no GPU. (A kernel spelled in a string is refused by the scan already.)"""
from __future__ import annotations

import pytest

from ptxbench.tools.cubin_symbols import entry_kernels
from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.workloads.solutions.faults import load_corpus

WORKLOAD, CORPUS = load_corpus()
CONTROL = CORPUS["control_correct"]["source"]


@pytest.mark.parametrize("guard", ["#if 0", "#ifdef PTXBENCH_NEVER_DEFINED"])
def test_a_launched_kernel_the_module_lacks_is_a_plan_error_without_a_gpu(guard):
    """The control GEMM launching `gemm_hidden`, defined only under a guard the compiler never takes."""
    hidden = CONTROL.replace('kernel = "gemm"', 'kernel = "gemm_hidden"') + (
        f'\n{guard}\nextern "C" __global__ void gemm_hidden(const __nv_bfloat16* A, const __nv_bfloat16* B,\n'
        '    __nv_bfloat16* C, int M, int N, int K) {}\n#endif\n')
    r = LocalEvaluator().evaluate(WORKLOAD, hidden, EvalOptions(no_gpu=True))
    assert r.status == "PLAN_ERROR", (r.status, r.message)
    assert any("launch 1: no kernel named 'gemm_hidden' in the module" in e and "defines: gemm" in e
               for e in r.plan_errors), r.plan_errors


def test_the_controls_kernel_is_found_and_device_functions_are_no_kernels(tmp_path):
    assert LocalEvaluator().evaluate(WORKLOAD, CONTROL, EvalOptions(no_gpu=True)).status == "COMPILED"
    from ptxbench.tools.compile import compile_source
    from ptxbench.tools.solution.parse import parse_solution

    source = CONTROL.replace("#include <stdint.h>", "#include <stdint.h>\n__device__ __noinline__ float twice(float x) "
                             "{ return 2.f * x; }").replace("C[(size_t)m * N + n] = __float2bfloat16(acc);",
                                                            "C[(size_t)m * N + n] = __float2bfloat16(twice(acc));")
    comp = compile_source(parse_solution(source).source, "cuda", "sm_90a")
    assert comp.status == "ok", comp.errors
    names = entry_kernels(open(comp.cubin_path, "rb").read())
    assert names == {"gemm"}  # the noinline device function has a body but no parameter bank
