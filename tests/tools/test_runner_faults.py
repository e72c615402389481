"""The worker's answers to hostile plans and kernels that no GPU is needed to check: the driver's refusals, faults
and out-of-memory errors stubbed (fixture `runner`: conftest.py), the runner's verdict and whether the worker goes."""
from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import torch

from ptxbench.tools.gpu.limits import DeviceLimits
from ptxbench.tools.gpu.messages import GpuJob
from ptxbench.tools.solution.plan import ResolvedPlan

SMOKE = "smoke_gemm_bf16_m256_n256_k512"


def two_launches(first_smem: int, second_smem: int) -> ResolvedPlan:
    launch = dict(kernel="K", grid=(1, 1, 1), block=(128, 1, 1), cluster=None, args=[])
    return ResolvedPlan(num_sms=132, launches=[{**launch, "smem": first_smem}, {**launch, "smem": second_smem}],
                        scratch=[], tmaps=[])


def stub_candidate(runner, monkeypatch) -> dict:
    attribute = {}
    info = SimpleNamespace(name="K", registers=32, static_smem=0, max_threads=1024, param_sizes=[], local_bytes=0)
    monkeypatch.setattr(runner, "load_module", lambda cubin: object())
    monkeypatch.setattr(runner, "get_function", lambda module, name: info)
    monkeypatch.setattr(runner, "set_dynamic_smem", lambda f, n: attribute.__setitem__(f.name, n))
    monkeypatch.setattr(runner, "ModuleState", lambda *a: None)
    monkeypatch.setattr(runner, "stack_limit", lambda: 1024)
    monkeypatch.setattr(runner.torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=0))
    return attribute


def test_a_kernel_launched_with_two_shared_memory_sizes_gets_the_larger(runner, monkeypatch):
    """The dynamic shared memory attribute is the kernel's, not the launch's: set to the last launch's size, a larger
    earlier launch would be refused and a valid plan called a PLAN_ERROR."""
    attribute = stub_candidate(runner, monkeypatch)
    runner.Candidate(b"", two_launches(200_000, 100_000), SimpleNamespace(limits=DeviceLimits()), None)
    assert attribute == {"K": 200_000}


def test_a_launch_refused_mid_plan_waits_for_the_launches_before_it(runner, monkeypatch):
    """Launch 1 is enqueued (it may spin forever) when launch 2 is refused: the stream is waited for under the
    candidate's watchdog before the PLAN_ERROR, so nothing of it runs into the next job on this worker."""
    stub_candidate(runner, monkeypatch)
    cand = runner.Candidate(b"", two_launches(0, 0), SimpleNamespace(limits=DeviceLimits()), None)
    events = []

    def launch_kernel(cfg, fn, params):
        if len(events) == 1:
            raise runner.CudaError("CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuLaunchKernelEx")
        events.append("launch")

    monkeypatch.setattr(runner, "launch_kernel", launch_kernel)
    monkeypatch.setattr(runner, "sync_stream", lambda stream: events.append("sync"))
    with pytest.raises(runner.Failed) as failed:
        cand.launch([(None, None, None), (None, None, None)])
    assert failed.value.status == "PLAN_ERROR" and events == ["launch", "sync"]
    events.clear()  # refused at the first launch: nothing to wait for
    monkeypatch.setattr(runner, "launch_kernel", lambda *a: (_ for _ in ()).throw(
        runner.CudaError("CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuLaunchKernelEx")))
    with pytest.raises(runner.Failed):
        cand.launch([(None, None, None)])
    assert events == []


def job_state(runner, monkeypatch, fail):
    """evaluate_job up to its correctness phase, which raises `fail`."""
    monkeypatch.setattr(runner, "evaluation_flush", lambda *a: None)
    monkeypatch.setattr(runner, "check_plan", lambda *a: [])
    monkeypatch.setattr(runner, "check_memory", lambda *a, **k: [])
    monkeypatch.setattr(runner, "module_globals", lambda cubin: [])
    monkeypatch.setattr(runner, "Candidate", lambda *a: MagicMock())
    monkeypatch.setattr(runner, "make_sets", lambda *a: [])
    monkeypatch.setattr(runner, "CandidateCalls", lambda *a: MagicMock())

    def correctness(*a):
        raise fail

    monkeypatch.setattr(runner, "correctness", correctness)
    state = SimpleNamespace(referee=MagicMock(), ceilings={}, cache=MagicMock(), reserved_frame=1 << 20,
                            limits=SimpleNamespace(name="NVIDIA H200", l2_bytes=60 << 20, sm_count=132,
                                                   max_threads_per_sm=2048))
    job = GpuJob(workload=SMOKE, plan={"num_sms": 132, "launches": [], "scratch": [], "tmaps": []})
    return state, job


def test_an_out_of_bounds_write_replaces_the_worker(runner, monkeypatch):
    """The guard zones found the stray write; where else it landed no check covers, so the worker is not reused."""
    fail = runner.Failed("RUNTIME_ERROR", "wrote past C", runtime_error="OUT_OF_BOUNDS_WRITE: C's guard zone")
    state, job = job_state(runner, monkeypatch, fail)
    out, replace = runner.evaluate_job(state, job, lambda *a, **k: None)
    assert out.status == "RUNTIME_ERROR" and replace and state.cache.clear.called


@pytest.mark.parametrize("name, status", [("CUDA_ERROR_ECC_UNCORRECTABLE", "INFRA_ERROR"),
                                          ("CUDA_ERROR_NVLINK_UNCORRECTABLE", "INFRA_ERROR"),
                                          ("CUDA_ERROR_ILLEGAL_ADDRESS", "RUNTIME_ERROR")])
def test_a_hardware_fault_is_the_machines_and_a_kernel_fault_the_kernels(runner, monkeypatch, name, status):
    state, job = job_state(runner, monkeypatch, runner.CudaError(name, "text", "cuStreamSynchronize"))
    out, replace = runner.evaluate_job(state, job, lambda *a, **k: None)
    assert out.status == status and name in out.runtime_error and replace


def test_out_of_memory_for_the_sets_releases_the_cache_once_then_blames_the_plan(runner, monkeypatch):
    """A plan within the candidate's share must not fail for what earlier evaluations left cached: the sets are made
    again after the cache is released; out of memory then, the plan is too large."""
    state = SimpleNamespace(cache=MagicMock())
    attempts = []

    def make_sets(*a):
        attempts.append(state.cache.clear.call_count)
        if len(attempts) == 1 or fail_twice:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return ["sets"]

    monkeypatch.setattr(runner, "make_sets", make_sets)
    monkeypatch.setattr(runner.torch.cuda, "empty_cache", lambda: None)
    fail_twice = False
    assert runner.sets_in_memory(state, None, None, [1, 2], "normal") == ["sets"] and attempts == [0, 1]
    fail_twice, attempts[:] = True, []
    with pytest.raises(runner.Failed) as failed:
        runner.sets_in_memory(state, None, None, [1, 2], "normal")
    assert failed.value.status == "PLAN_ERROR" and len(attempts) == 2


class FrameScrub:
    """The scrub's launches, whose first with a grown frame makes the driver reserve it: `refusals` of them fail out
    of memory (or with `error`), the rest succeed."""

    def __init__(self, refusals: int = 0, error: str = "CUDA_ERROR_OUT_OF_MEMORY"):
        self.refusals, self.error, self.frames = refusals, error, []

    def run(self, stream, frame):
        self.frames.append(frame)
        if len(self.frames) <= self.refusals:
            from ptxbench.tools.gpu.launch import CudaError
            raise CudaError(self.error, "out of memory", "cuLaunchKernelEx")


def local_frame_job(runner, monkeypatch, frame: int, scrub: FrameScrub | None = None, reserved: int = 1024):
    """evaluate_job with a loaded candidate whose scrub frame is `frame` bytes a thread; its checked call fails."""
    from ptxbench.tools.gpu.limits import DeviceLimits

    monkeypatch.setattr(runner, "evaluation_flush", lambda *a: None)
    monkeypatch.setattr(runner, "check_plan", lambda *a: [])
    monkeypatch.setattr(runner, "module_globals", lambda cubin: [])
    monkeypatch.setattr(runner, "sync_stream", lambda stream: None)
    monkeypatch.setattr(runner.torch.cuda, "empty_cache", lambda: None)
    cand = SimpleNamespace(frame=frame, close=lambda: None, stream=0, scrub=scrub or FrameScrub())
    monkeypatch.setattr(runner, "Candidate", lambda *a: cand)
    made = []
    monkeypatch.setattr(runner, "make_sets", lambda *a: made.append("sets") or [])
    monkeypatch.setattr(runner, "CandidateCalls", lambda *a: MagicMock())

    def correctness(*a):
        raise runner.Failed("INCORRECT_NUMERICAL", "C is wrong")

    monkeypatch.setattr(runner, "correctness", correctness)
    state = SimpleNamespace(referee=MagicMock(), ceilings={}, cache=MagicMock(), reserved_frame=reserved,
                            limits=DeviceLimits(total_memory=80 << 30))
    job = GpuJob(workload=SMOKE, plan={"num_sms": 132, "launches": [], "scratch": [], "tmaps": []})
    out, replace = runner.evaluate_job(state, job, lambda *a, **k: None)
    local_frame_job.state, local_frame_job.candidate = state, cand
    return out, replace, made


def test_a_kernel_whose_local_frame_takes_the_gpus_memory_is_a_plan_error(runner, monkeypatch):
    """The driver reserves a kernel's local frame for every thread the GPU holds (2048 x 132 on an H100) and never
    gives it back while the context lives: a `.local` array of 160 KB a thread the kernel hardly touches (the scrub
    rounds the frame to 256 KB) is 70 GB of an 80 GB GPU. Left to the first launch, it failed in the harness's own preparation, or
    took the memory the next candidates' buffers needed (their PLAN_ERROR, or the harness's INFRA_ERROR)."""
    out, replace, made = local_frame_job(runner, monkeypatch, 256 << 10)
    assert out.status == "PLAN_ERROR" and not made and not replace, out
    assert "local memory" in out.plan_errors[0] and "GiB" in out.plan_errors[0]


def test_a_worker_whose_local_memory_a_candidate_grew_is_replaced(runner, monkeypatch):
    """A frame that fits the candidate's share (16 KB a thread: 4.4 GB) still stays reserved after the evaluation:
    the worker is replaced, so the next candidate finds the GPU's memory (and the scrub's frame) as a fresh one has
    them; the default 1 KB stack (277 MB) is kept."""
    out, replace, made = local_frame_job(runner, monkeypatch, 16 << 10)
    assert out.status == "INCORRECT_NUMERICAL" and made and replace, out
    out, replace, made = local_frame_job(runner, monkeypatch, 1 << 10)
    assert out.status == "INCORRECT_NUMERICAL" and made and not replace, out


def test_a_grown_frame_is_reserved_after_the_allocators_cache_is_released(runner, monkeypatch):
    """torch's allocator keeps freed blocks mapped, which the driver cannot take for local memory: the frame is
    reserved (the scrub's launch) before the sets are made, and a refusal releases the worker's cached instances
    once; the evaluation goes on."""
    scrub = FrameScrub(refusals=1)
    out, replace, made = local_frame_job(runner, monkeypatch, 16 << 10, scrub)
    assert out.status == "INCORRECT_NUMERICAL" and made and replace, out
    assert scrub.frames == [16 << 10, 16 << 10]


def test_a_frame_the_worker_cannot_reserve_is_the_workers_failure_not_the_kernels(runner, monkeypatch):
    """The plan's memory, frame included, fits the candidate's share: a worker that still cannot reserve it is
    replaced and the verdict is INFRA_ERROR (it was the kernel's RUNTIME_ERROR, 'out of memory' at a launch of the
    harness's own scrub), before any input set is made."""
    out, replace, made = local_frame_job(runner, monkeypatch, 16 << 10, FrameScrub(refusals=2))
    assert out.status == "INFRA_ERROR" and replace and not made, out
    assert "CUDA_ERROR_OUT_OF_MEMORY" in out.runtime_error and "local memory" in out.message
    out, replace, made = local_frame_job(runner, monkeypatch, 16 << 10, FrameScrub(1, "CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert out.status == "RUNTIME_ERROR" and replace and not made, out  # not the reservation's: as any fault
    scrub = FrameScrub(refusals=5)  # a frame the worker has reserved already: nothing to reserve
    out, replace, made = local_frame_job(runner, monkeypatch, 1 << 10, scrub, reserved=1 << 10)
    assert out.status == "INCORRECT_NUMERICAL" and made and scrub.frames == [], out


def test_a_frame_past_the_workers_reserved_one_is_reserved_first_even_when_small(runner, monkeypatch):
    """2 KB a thread (553 MB on an H200) is kept by the worker, not replaced for: still reserved before the sets with
    the allocator's cache released, and the worker remembers it, so the next candidate of that frame skips it."""
    scrub = FrameScrub(refusals=1)
    out, replace, made = local_frame_job(runner, monkeypatch, 2 << 10, scrub, reserved=1 << 10)
    assert out.status == "INCORRECT_NUMERICAL" and made and not replace, out
    assert scrub.frames == [2 << 10, 2 << 10] and local_frame_job.state.reserved_frame == 2 << 10
    out, replace, made = local_frame_job(runner, monkeypatch, 1 << 10, FrameScrub(refusals=9), reserved=2 << 10)
    assert out.status == "INCORRECT_NUMERICAL" and made and not replace, out


def test_the_scrub_covers_the_frame_the_worker_reserved_not_only_the_candidates(runner, monkeypatch):
    """The context keeps the largest frame any earlier candidate made it reserve, and a kernel with a 16-byte frame
    reaches below it through a generic pointer: on an H100 a stash 2 KiB below the frame (after a 3 KiB grower) kept
    an output from call to call while the scrub wrote the candidate's 1 KiB (tests/data/cheats/attacks/
    local_below_frame_stash.cu, 28% faster than the same loop without it). Every call's scrub writes the reserved frame."""
    local_frame_job(runner, monkeypatch, 1 << 10, reserved=3 << 10)
    assert local_frame_job.candidate.scrub_frame == 3 << 10
    local_frame_job(runner, monkeypatch, 4 << 10, reserved=3 << 10)  # grown: its own frame, now the reserved one
    assert local_frame_job.candidate.scrub_frame == 4 << 10 == local_frame_job.state.reserved_frame
