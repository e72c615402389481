"""No-GPU mode runs the worker's memory check (tools/gpu/limits.check_memory) against the largest Hopper's memory: a
plan with 64 scratch buffers of 32 GiB each read as COMPILED without a GPU while every worker refused it (PLAN_ERROR).
What some Hopper could hold stays COMPILED: without a GPU, which one runs it is unknown. Real nvcc and ptxas, no GPU."""
from __future__ import annotations

import pytest

from ptxbench.tools.evaluate import LocalEvaluator
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.limits import CANDIDATE_MEMORY_SHARE, LARGEST_HOPPER_MEMORY, DeviceLimits, check_memory
from ptxbench.tools.gpu.seeds import input_sets
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.faults import load_corpus

WORKLOAD, CORPUS = load_corpus()
CONTROL = CORPUS["control_correct"]["source"]
GiB = 2**30


def _with_scratch(count: int, nbytes: int) -> str:
    """control_correct with `count` uint8 scratch buffers of `nbytes` each (declared, unused: a warning only)."""
    decls = "".join(f'\n[scratch.pad{i}]\ndtype = "uint8"\nshape = [{nbytes}]\nzero = false\n' for i in range(count))
    src = CONTROL.replace("\n*/", decls + "*/", 1)
    assert src.count("[scratch.pad") == count
    return src


def _no_gpu(source: str):
    return LocalEvaluator().evaluate(WORKLOAD, source, EvalOptions(no_gpu=True))


def test_scratch_no_hopper_gpu_holds_is_a_plan_error_without_a_gpu():
    r = _no_gpu(_with_scratch(64, 32 * GiB))
    assert r.status == "PLAN_ERROR" and not r.gpu_evaluated, (r.status, r.message)
    assert len(r.plan_errors) == 1, r.plan_errors
    assert "a candidate may take on the largest Hopper GPU (144 GiB)" in r.plan_errors[0]
    assert "largest: pad" in r.plan_errors[0] and "32.0 GiB" in r.plan_errors[0]


def test_what_an_h200_holds_but_an_h100_does_not_stays_compiled():
    """Between an H100's share (40 GiB) and the largest Hopper's (72 GiB): the GPU that runs it decides."""
    n_sets = input_sets(None, get_workload(WORKLOAD).trials)
    per_set = 50 * GiB // n_sets
    h100 = DeviceLimits(total_memory=80 * GiB)
    assert check_memory({"pad0": per_set}, 0, n_sets, h100)  # an H100's worker refuses it
    r = _no_gpu(_with_scratch(1, per_set))
    assert r.status == "COMPILED" and r.plan_errors == [], (r.status, r.message)


def test_the_bound_is_the_largest_hopper_share():
    """Just past the largest Hopper's share is refused, just inside passes (the control's own tensors and the guard
    zones are counted as the worker counts them, so the margin is theirs)."""
    n_sets = input_sets(None, get_workload(WORKLOAD).trials)
    allowed = int(LARGEST_HOPPER_MEMORY * CANDIDATE_MEMORY_SHARE)
    assert _no_gpu(_with_scratch(1, allowed // n_sets + 1)).status == "PLAN_ERROR"
    assert _no_gpu(_with_scratch(1, allowed // n_sets - 64 * 2**20)).status == "COMPILED"


@pytest.mark.parametrize("trials", [2, 3])
def test_the_input_sets_counted_are_the_evaluations(trials):
    """--trials sets how many input sets the worker makes, each with its own scratch: 2 sets of 30 GiB fit an H200, 3 no Hopper."""
    r = LocalEvaluator().evaluate(WORKLOAD, _with_scratch(1, 30 * GiB), EvalOptions(no_gpu=True, trials=trials))
    assert r.status == ("COMPILED" if trials == 2 else "PLAN_ERROR"), (r.status, r.message)


def test_a_module_global_no_hopper_gpu_holds_is_a_plan_error_without_a_gpu():
    """The driver allocates a module's globals when it loads the cubin (a few KB of text for 128 GiB here)."""
    src = CONTROL.replace("#include <stdint.h>", "#include <stdint.h>\n__device__ uint8_t big_global[1ull << 37];", 1)
    src = src.replace("  float acc = 0.f;\n", "  float acc = big_global[7];\n", 1)
    r = _no_gpu(src)
    assert r.status == "PLAN_ERROR", (r.status, r.message)
    assert "largest: the module's globals 128.0 GiB" in r.plan_errors[0], r.plan_errors
