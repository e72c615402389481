"""The GPU evaluator end to end on a real GPU: device-limit checks in the worker (bypassing the parser's
static checks), cluster and TMA launches, the GEMM reference with timing, and the A/A test."""
from __future__ import annotations

import pytest

from ptxbench.tools.compile import compile_source
from ptxbench.tools.evaluator import EvalOptions
from ptxbench.tools.gpu.limits import DeviceLimits
from ptxbench.tools.solution.parse import parse_solution, resolve_plan
from ptxbench.workloads.registry import get_workload
from ptxbench.workloads.solutions.faults import load_corpus

from gpu_helpers import ROOT, SOLUTIONS, shared_evaluator

pytestmark = pytest.mark.gpu
WORKLOAD, CORPUS = load_corpus()
GEMM = "gemm_bf16_m8192_n7168_k5120"


def _job(source: str, workload: str = WORKLOAD) -> dict:
    wl = get_workload(workload)
    sol = parse_solution(source, wl)
    assert not isinstance(sol, list), sol
    comp = compile_source(sol.source, sol.language, "sm_90a", wl)
    assert comp.status == "ok", comp.errors
    plan = resolve_plan(sol.plan, wl, shared_evaluator().pool.limits["sm_count"])
    with open(comp.cubin_path, "rb") as f:
        cubin = f.read()
    return {"type": "evaluate", "workload": workload, "cubin": cubin, "plan": plan.model_dump(), "trials": 1,
            "dist": "normal", "seed": 0, "time": False, "timeout_s": 10}


def _submit(job: dict):
    return shared_evaluator().pool.submit(job)


CONTROL = CORPUS["control_correct"]["source"]


def test_control_passes_through_the_raw_job_path():
    r = _submit(_job(CONTROL))
    assert r.status == "PASSED", r


@pytest.mark.parametrize("change, expect", [
    (lambda l: l.update(smem=300000), "232448"),
    (lambda l: l.update(args=l["args"][:-1]), "takes 6 parameters"),
    (lambda l: l["args"].append({"kind": "scalar", "name": "7", "type": "i64", "value": 7}), "takes 6 parameters"),
    (lambda l: l["args"].__setitem__(5, {"kind": "scalar", "name": "K", "type": "i64", "value": 512}), "8 bytes"),
    (lambda l: l.update(block=(2048, 1, 1)), "1024"),
    (lambda l: l.update(cluster=(16, 1, 1), grid=(16, 256, 1)), "cluster"),
    (lambda l: l.update(kernel="nope"), "no kernel named 'nope'"),
])
def test_worker_refuses_plans_outside_the_device_limits(change, expect):
    job = _job(CONTROL)
    change(job["plan"]["launches"][0])
    r = _submit(job)
    assert r.status == "PLAN_ERROR", r
    assert any(expect in e for e in r.plan_errors), r.plan_errors
    assert _submit(_job(CONTROL)).status == "PASSED"


def test_cluster_launch_runs():
    job = _job(CONTROL)
    job["plan"]["launches"][0]["cluster"] = (2, 1, 1)  # grid.x = 2: one cluster of 2 CTAs per row
    r = _submit(job)
    assert r.status == "PASSED", r


def test_tma_descriptor_is_encoded_and_passed_by_value():
    src = (ROOT / "tests" / "data" / "solutions" / "gemm_naive_sm90a.cu").read_text()
    r = shared_evaluator().evaluate(WORKLOAD, src, EvalOptions(time=False))
    assert r.status == "PASSED", (r.message, r.plan_errors, r.runtime_error)


def test_gemm_reference_passes_with_timing_and_a_full_record():
    src = (SOLUTIONS / f"{GEMM}.cu").read_text()
    r = shared_evaluator().evaluate(GEMM, src, EvalOptions())
    assert r.status == "PASSED", (r.message, r.plan_errors, r.runtime_error)
    assert r.gpu_evaluated and r.compile.targets["wgmma"].in_sass and r.compile.targets["tma"].in_sass
    assert len({s.trial for s in r.correctness}) == 4  # 3 input sets + the new-inputs check at the end
    t = r.timing
    assert t.input_sets == 3 and t.verified_calls >= 150 and r.input_seed is not None
    assert t.primary_baseline == "cublas" and t.candidate.n == 150 and t.baselines["cublas"].n == 150
    lo, hi = t.speedup_ci
    assert lo <= t.speedup <= hi and 0.2 < t.speedup < 1.5
    assert 10 < t.sol_pct < 110 and t.ceilings["tflops_bf16"] > 300 and t.ceilings["hbm_gbps"] > 1000
    assert r.fingerprint.gpu and r.fingerprint.driver and r.fingerprint.torch and r.fingerprint.sm_count
    for phase in ("compile", "gpu", "gpu.correctness", "gpu.timing"):
        assert phase in r.seconds


def test_inputs_are_drawn_per_evaluation_and_a_seed_replays_the_verdict():
    ev = shared_evaluator()
    a = ev.evaluate(WORKLOAD, CONTROL, EvalOptions(time=False))
    b = ev.evaluate(WORKLOAD, CONTROL, EvalOptions(time=False))
    assert a.input_seed != b.input_seed
    again = ev.evaluate(WORKLOAD, CONTROL, EvalOptions(time=False, seed=a.input_seed))
    assert again.input_seed == a.input_seed
    assert [s.max_abs_err for s in again.correctness] == [s.max_abs_err for s in a.correctness]


def test_aa_speedup_is_one():
    r = _submit({"type": "aa", "workload": GEMM, "timeout_s": 60, "iters": 30})
    assert abs(r.timing.speedup - 1.0) < 0.03, r.timing


def test_pool_is_healthy_at_the_end():
    health = shared_evaluator().pool.ping()
    assert health and all(h["ok"] for h in health)


def test_a_plan_asking_for_more_scratch_than_the_gpu_holds_is_a_plan_error():
    """Six 30 GiB scratch buffers: each under the per-buffer cap, together more than any GPU has. Refused with
    the sizes before anything is allocated, and the worker evaluates the next candidate as usual."""
    scratch = "".join(f'\n[scratch.big{i}]\ndtype = "float32"\nshape = ["8", "1024", "1024", "960"]\n' for i in range(6))
    source = CONTROL.replace('args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]\n',
                             'args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]\n' + scratch)
    r = shared_evaluator().evaluate(WORKLOAD, source, EvalOptions(time=False, profile_on_pass=False, timeout_s=30))
    assert r.status == "PLAN_ERROR", (r.status, r.message)
    assert any("GiB" in e and "more than" in e for e in r.plan_errors), r.plan_errors
    assert _submit(_job(CONTROL)).status == "PASSED"


def _with_local_frame(kb: int) -> str:
    """The control GEMM with a `.local` array of `kb` KB a thread that it touches once (one byte, written then read)."""
    source = CONTROL.replace("  float acc = 0.f;\n",
                             f"  volatile unsigned char frame[{kb} * 1024];  // reserved whole, hardly used\n"
                             f"  const int at = (threadIdx.x * 97) % ({kb} * 1024);\n  frame[at] = 0;\n"
                             "  float acc = frame[at];\n", 1)
    assert source != CONTROL
    return source


def test_a_local_frame_the_gpu_cannot_hold_beside_the_plan_is_a_plan_error():
    """500 KB a thread (the scrub's frame 512 KB) is 142 GB reserved for every thread the GPU holds: refused with the
    size before any launch, and the worker evaluates the next candidate as usual."""
    r = shared_evaluator().evaluate(WORKLOAD, _with_local_frame(500), EvalOptions(time=False, profile_on_pass=False,
                                                                                  timeout_s=30))
    assert r.status == "PLAN_ERROR", (r.status, r.message)
    assert any("local memory" in e for e in r.plan_errors), r.plan_errors
    assert _submit(_job(CONTROL)).status == "PASSED"


def test_the_local_memory_a_candidate_reserved_does_not_stay_with_the_next():
    """16 KB a thread: 4.4 GB on an H200 that the driver keeps for the context's lifetime. The candidate passes, and
    its worker is replaced, so the next evaluation starts with a fresh worker's memory."""
    pool = shared_evaluator().pool
    replaced = sum(slot.replacements for slot in pool.slots)
    r = shared_evaluator().evaluate(WORKLOAD, _with_local_frame(16), EvalOptions(time=False, profile_on_pass=False,
                                                                                 timeout_s=30))
    assert r.status == "PASSED", (r.status, r.message)
    assert sum(slot.replacements for slot in pool.slots) == replaced + 1, "the worker that reserved it was kept"
    assert _submit(_job(CONTROL)).status == "PASSED"


LOCAL_PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 p, .param .u32 i)
{
  .local .align 16 .b8 frame[16384];
  .reg .b32 %r<3>;
  .reg .b64 %rd<5>;
  ld.param.u32 %r1, [i];
  cvt.u64.u32 %rd1, %r1;
  mov.u64 %rd2, frame;
  add.u64 %rd3, %rd2, %rd1;
  st.local.u8 [%rd3], %r1;
  ld.local.u8 %r2, [%rd3];
  ld.param.u64 %rd4, [p];
  cvta.to.global.u64 %rd4, %rd4;
  st.global.u32 [%rd4], %r2;
  ret;
}
"""

# A fresh process (the tests' own context keeps its local memory as it is): free device memory before one launch of
# one warp of LOCAL_PTX, after it, and after its module is unloaded.
LOCAL_PROBE = '''
import ctypes, sys
import torch
from ptxbench.tools.gpu.launch import get_function, launch_1d, load_module, unload_module
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
free = lambda: torch.cuda.mem_get_info()[0]
sink = torch.zeros(4, dtype=torch.int32, device="cuda")
module = load_module(sys.argv[1].encode() + b"\\0")
fn = get_function(module, "k")
torch.cuda.synchronize()
before = free()
launch_1d(fn, 1, 32, 0, torch.cuda.current_stream().cuda_stream, [ctypes.c_uint64(sink.data_ptr()), ctypes.c_uint32(5)])
torch.cuda.synchronize()
after = free()
unload_module(module)
torch.cuda.synchronize()
print(fn.local_bytes, before - after, before - free())
'''


def test_the_driver_keeps_a_kernels_local_frame_for_every_thread_after_it_ends():
    """The fact limits.local_reservation rests on: one launch of one warp with a 16 KB frame takes 16 KB x every thread
    the GPU holds, and the context keeps it after the kernel (and its module) are gone."""
    import subprocess
    import sys

    from ptxbench.tools.gpu.limits import local_reservation

    limits = shared_evaluator().pool.limits
    lim = DeviceLimits(sm_count=limits["sm_count"], max_threads_per_sm=limits["max_threads_per_sm"])
    done = subprocess.run([sys.executable, "-c", LOCAL_PROBE, LOCAL_PTX], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    local_bytes, taken, kept = map(int, done.stdout.split())
    assert local_bytes == 16384  # what Candidate.frame reads: the frame a .local array makes
    assert taken >= 0.9 * local_reservation(16384, lim), (taken, local_reservation(16384, lim))
    assert kept >= 0.9 * taken, (taken, kept)


# A fresh process: torch's allocator caches a block of all but 8 GiB of the free memory, then a 64 KB frame (17 GB
# reserved on 132 SMs) is launched; again after the cache is released.
CACHED_PROBE = '''
import ctypes, sys
import torch
from ptxbench.tools.gpu.launch import CudaError, get_function, launch_1d, load_module
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
sink = torch.zeros(4, dtype=torch.int32, device="cuda")
fn = get_function(load_module(sys.argv[1].encode() + b"\\0"), "k")
block = torch.empty(torch.cuda.mem_get_info()[0] - (8 << 30), dtype=torch.uint8, device="cuda")
del block  # freed, and kept mapped by the allocator
stream = torch.cuda.current_stream().cuda_stream
args = [ctypes.c_uint64(sink.data_ptr()), ctypes.c_uint32(5)]
try:
    launch_1d(fn, 1, 32, 0, stream, args); torch.cuda.synchronize(); print("launched")
except CudaError as e:
    print(e.name, e.sticky)
torch.cuda.empty_cache()
launch_1d(fn, 1, 32, 0, stream, args); torch.cuda.synchronize(); print("launched")
'''


def test_the_driver_cannot_take_what_the_allocator_caches_for_a_local_frame():
    """The fact runner.reserve_local_frame rests on: the memory torch's allocator keeps cached is not the driver's to
    reserve a frame from; the launch fails out of memory, not stickily, and succeeds once the cache is released."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CACHED_PROBE, LOCAL_PTX.replace("frame[16384]", "frame[65536]")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["CUDA_ERROR_OUT_OF_MEMORY False", "launched"], done.stdout
