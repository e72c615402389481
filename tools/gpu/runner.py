"""One candidate on the worker's GPU: load -> plan checks -> correctness trials -> timing -> repeat-call check.

Returns a plain dict (the fields of EvalResult that the GPU decides) and whether the worker must
be replaced (a sticky CUDA error poisons the context). Every kernel failure is a status here;
only harness bugs escape as exceptions, and the worker turns those into INFRA_ERROR.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

from ...workloads.baselines import make_baseline
from ...workloads.registry import get_workload
from ...workloads.schema import Workload
from ..plan import ResolvedPlan
from . import ceilings as roofline
from .buffers import BufferSet, allocate_set
from .correctness import output_digest, replay_note
from .launch import CudaError, get_function, launch_config, launch_kernel, load_module, pack_params, \
    set_dynamic_smem, sync_stream, unload_module
from .limits import check_function, check_plan
from .state import CHECK_SEED_OFFSET, WorkerState
from .tensormap import encode
from .timing import SLOW_FACTOR, plan_iterations, probe_ms, speedup, summarize, time_interleaved
from .verdict import Failed, judge, status_of

Phase = Callable[[str, float], None]  # (phase name, seconds the watchdog allows for it)


class Candidate:
    """A loaded module and the launches of its plan, bound to one buffer set at a time."""

    def __init__(self, cubin: bytes, plan: ResolvedPlan, state: WorkerState, wl: Workload):
        self.plan, self.wl = plan, wl
        try:
            self.module = load_module(cubin)
        except CudaError as e:
            raise Failed("RUNTIME_ERROR", f"the driver could not load the cubin: {e}", runtime_error=str(e),
                         replace=e.sticky) from None
        self.functions = {}
        errors = []
        for i, launch in enumerate(plan.launches):
            if launch.kernel not in self.functions:
                try:
                    self.functions[launch.kernel] = get_function(self.module, launch.kernel)
                except CudaError as e:
                    errors.append(f"launch {i + 1}: no kernel named {launch.kernel!r} in the module ({e.name})")
                    continue
            f = self.functions[launch.kernel]
            errors += check_function(launch, i, f.registers, f.static_smem, f.max_threads, f.param_sizes, state.limits)
        if errors:
            raise Failed("PLAN_ERROR", "the launch plan does not fit the kernels or the device", plan_errors=errors)
        for launch in plan.launches:
            if launch.smem > 0:
                try:
                    set_dynamic_smem(self.functions[launch.kernel], launch.smem)
                except CudaError as e:
                    raise Failed("PLAN_ERROR", str(e), plan_errors=[f"{launch.kernel}: dynamic shared memory "
                                                                    f"{launch.smem} bytes refused: {e}"]) from None
        self.stream = torch.cuda.current_stream().cuda_stream
        self.bound: list = []
        self.bufs: BufferSet | None = None

    def bind(self, bufs: BufferSet) -> None:
        pointers = bufs.pointers()
        tmaps = {}
        for t in self.plan.tmaps:
            try:
                tmaps[t.name] = encode(t, pointers[t.tensor])
            except CudaError as e:
                raise Failed("PLAN_ERROR", f"tensor map {t.name} was refused by the driver",
                             plan_errors=[f"tmap {t.name}: {e}"]) from None
        self.bound = [(launch_config(launch, self.stream), self.functions[launch.kernel],
                       pack_params(launch, pointers, tmaps)) for launch in self.plan.launches]
        self.bufs = bufs

    def __call__(self) -> None:
        self.bufs.zero_scratch_()
        for cfg, fn, params in self.bound:
            launch_kernel(cfg, fn, params)

    def run_checked(self) -> None:
        """One launch sequence, synchronised; a CUDA error becomes RUNTIME_ERROR."""
        try:
            self()
            sync_stream(self.stream)
        except CudaError as e:
            if not e.sticky and e.what.startswith("cuLaunchKernelEx"):
                # refused at launch (resources, cluster shape ...): the plan does not fit, the context is fine
                raise Failed("PLAN_ERROR", f"the driver refused the launch: {e}", plan_errors=[str(e)]) from None
            raise Failed("RUNTIME_ERROR", f"the kernel failed: {e.name}: {e.text}", runtime_error=f"{e.name}: {e.text}",
                         replace=True) from None

    def close(self) -> None:
        self.bound, self.bufs = [], None
        unload_module(self.module)


def new_buffers(wl: Workload, plan: ResolvedPlan) -> BufferSet:
    tensors = [(t.name, wl.shape(t.name), t.dtype, t.role) for t in wl.tensors]
    scratch = [(s.name, s.shape, s.dtype, s.zero) for s in plan.scratch]
    return allocate_set(tensors, scratch)


def correctness(cand: Candidate, state: WorkerState, wl: Workload, job: dict, phase: Phase, seconds: dict):
    trials = job.get("trials") or wl.trials
    dist, seed = job.get("dist", "normal"), int(job.get("seed", 0))
    all_stats, digests = [], {}
    bufs, kept = None, []  # every trial's buffers stay allocated, so each trial gets different addresses
    for t in range(trials):
        phase("prepare", job["prepare_timeout_s"])
        data = state.trial_data(wl, seed + t, dist)
        bufs = new_buffers(wl, cand.plan)
        kept.append(bufs)
        bufs.load_inputs(data.inputs)
        cand.bind(bufs)
        phase("run", job["timeout_s"])  # the watchdog's candidate limit covers the kernels' execution only
        t0 = time.perf_counter()
        cand.run_checked()
        seconds["first_run"] = seconds.get("first_run", time.perf_counter() - t0)
        phase("check", job["prepare_timeout_s"])
        stats = judge(bufs, data, wl, t, dist, lambda: state.library_errors(wl, seed + t, dist))
        digest = tuple(output_digest(bufs.tensors[n].data) for n in data.reference)
        note = replay_note(digest, digests)
        if note:
            for s in stats:
                s.passed, s.note = False, "; ".join(filter(None, [s.note, note]))
        digests[t] = digest
        all_stats += stats
        if status_of(stats) != "PASSED":
            break
    return all_stats, bufs, digests


def repeat_checks(cand: Candidate, state: WorkerState, wl: Workload, job: dict, phase: Phase, digests: dict) -> list:
    """Two more calls on the SAME buffers with the outputs poisoned again: first with the same input values,
    then with new ones. A kernel that skips work or replays an earlier result on a repeat call (keyed by
    pointers, by sampled contents or by a flag it left in memory) fails one of them."""
    dist, seed = job.get("dist", "normal"), int(job.get("seed", 0))
    trials = job.get("trials") or wl.trials
    stats_all = []
    for label, data_seed in (("same inputs", seed + trials - 1), ("new inputs", seed + CHECK_SEED_OFFSET)):
        phase("prepare", job["prepare_timeout_s"])
        data = state.trial_data(wl, data_seed, dist)
        cand.bufs.load_inputs(data.inputs)
        cand.bufs.reset()
        phase("run", job["timeout_s"])
        cand.run_checked()
        phase("check", job["prepare_timeout_s"])
        trial = max(digests) + 1 if digests else 0
        stats = judge(cand.bufs, data, wl, trial, dist, lambda: state.library_errors(wl, data_seed, dist))
        digest = tuple(output_digest(cand.bufs.tensors[n].data) for n in data.reference)
        replay = replay_note(digest, {k: v for k, v in digests.items() if label == "new inputs"})
        digests[trial] = digest
        for s in stats:
            if not s.passed or replay:
                s.passed = False
                s.note = "; ".join(filter(None, [f"repeat call on the same buffers ({label}): the output was not "
                                                 f"recomputed, so the kernel reuses results across calls", s.note, replay]))
        stats_all += stats
        if status_of(stats) != "PASSED":
            break
    return stats_all


def time_candidate(cand: Candidate, state: WorkerState, wl: Workload, job: dict, phase: Phase, first_run_s: float) -> dict:
    dist, seed = job.get("dist", "normal"), int(job.get("seed", 0))
    primary = wl.primary_baseline.name
    phase("prepare", job["prepare_timeout_s"])
    base = state.baseline(wl, primary, seed, dist)
    ceil = state.get_ceilings()
    flush_bytes = max(2 * state.limits.l2_bytes, 64 * 2**20)
    others = {}
    for b in wl.baselines:
        if b.name != primary:
            entry = state.baseline(wl, b.name, seed, dist)
            if not entry.stats:
                entry.stats = summarize(time_interleaved([entry.fn], flush_bytes=flush_bytes, warmup=3, iters=20,
                                                         trials=1)[0]).model_dump()
            others[b.name] = entry.stats
    phase("timing", job["timeout_s"])
    per_call_ms = first_run_s * 1000 + 2.0
    slow = False
    if per_call_ms <= 0.3 * job["timeout_s"] * 1000:  # the probe's two calls fit the watchdog with room to spare
        cand_probe, base_probe = probe_ms(cand), probe_ms(base.fn)
        slow = cand_probe > SLOW_FACTOR * base_probe
        per_call_ms = min(per_call_ms, cand_probe + 2.0)
    warmup, iters, trials, reduced = plan_iterations(job, per_call_ms, slow)
    cand_ms, base_ms = time_interleaved([cand, base.fn], flush_bytes=flush_bytes, warmup=warmup, iters=iters, trials=trials)
    sync_stream(cand.stream)
    return timing_record(wl, cand_ms, base_ms, primary, others, ceil, state.limits.name, reduced, slow)


def timing_record(wl: Workload, cand_ms, base_ms, primary: str, others: dict, ceil: dict, gpu: str, reduced: bool,
                  slow: bool = False) -> dict:
    cstat = summarize(cand_ms)
    sp, sp_ci = speedup(base_ms, cand_ms)
    flags = roofline.flags(sp, wl.flops, wl.min_bytes, cstat.median_ms, ceil, gpu)
    if slow:
        flags.append("slow_candidate")
    if reduced:
        flags.append("reduced_iterations")
    return {
        "candidate": cstat.model_dump(),
        "baselines": {primary: summarize(base_ms).model_dump(), **others},
        "primary_baseline": primary,
        "speedup": sp,
        "speedup_ci": sp_ci,
        "tflops": wl.flops / cstat.median_ms / 1e9,
        "sol_pct": roofline.sol_pct(wl.flops, wl.min_bytes, cstat.median_ms, ceil),
        "ceilings": ceil,
        "flags": flags,
    }


def evaluate_job(state: WorkerState, job: dict, phase: Phase) -> tuple[dict, bool]:
    """The worker's answer to one 'evaluate' request: (result fields, replace this worker)."""
    seconds: dict[str, float] = {}
    t_start = time.perf_counter()
    wl = get_workload(job["workload"])
    plan = ResolvedPlan.model_validate(job["plan"])
    out: dict = {"status": "PASSED", "correctness": [], "timing": None, "plan_errors": [], "runtime_error": ""}
    cand = None
    try:
        sizes = {t.name: math.prod(wl.shape(t.name)) * torch.empty((), dtype=getattr(torch, t.dtype)).element_size()
                 for t in wl.tensors}
        sizes.update({s.name: s.nbytes for s in plan.scratch})
        errors = check_plan(plan, state.limits, sizes)
        if errors:
            raise Failed("PLAN_ERROR", "the launch plan exceeds the device's limits", plan_errors=errors)
        phase("load", job["prepare_timeout_s"])
        cand = Candidate(job["cubin"], plan, state, wl)
        t0 = time.perf_counter()
        stats, _bufs, digests = correctness(cand, state, wl, job, phase, seconds)
        out["correctness"] = [s.model_dump() for s in stats]
        out["status"] = status_of(stats)
        seconds["correctness"] = time.perf_counter() - t0
        if out["status"] == "PASSED" and job.get("time", True):
            t0 = time.perf_counter()
            out["timing"] = time_candidate(cand, state, wl, job, phase, seconds.get("first_run", 0.0))
            seconds["timing"] = time.perf_counter() - t0
        if out["status"] == "PASSED":
            t0 = time.perf_counter()
            extra = repeat_checks(cand, state, wl, job, phase, digests)
            out["correctness"] += [s.model_dump() for s in extra]
            out["status"] = status_of(extra)
            if out["status"] != "PASSED" and out["timing"]:
                out["timing"]["flags"].append("result_cached_across_calls")
            seconds["repeat_check"] = time.perf_counter() - t0
        replace = False
    except Failed as f:
        out.update(status=f.status, message=f.message, plan_errors=f.plan_errors, runtime_error=f.runtime_error)
        replace = f.replace
        if f.runtime_error.startswith("OUT_OF_BOUNDS_WRITE"):
            state.cache.clear()  # the stray write may have landed in cached inputs or references
    finally:
        if cand is not None:
            try:
                cand.close()
            except Exception:  # noqa: BLE001 - a poisoned context cannot unload; the worker is replaced anyway
                pass
    seconds["gpu_total"] = time.perf_counter() - t_start
    out["seconds"] = seconds
    return out, replace


def aa_job(state: WorkerState, job: dict, phase: Phase) -> tuple[dict, bool]:
    """The A/A test: the primary baseline timed as if it were the candidate, against itself."""
    wl = get_workload(job["workload"])
    dist, seed = job.get("dist", "normal"), int(job.get("seed", 0))
    phase("prepare", job["prepare_timeout_s"])
    primary = wl.primary_baseline.name
    base = state.baseline(wl, primary, seed, dist)
    twin = make_baseline(wl, primary, state.trial_data(wl, seed, dist).inputs)  # an independent instance, same data
    ceil = state.get_ceilings()
    phase("timing", job["timeout_s"])
    flush_bytes = max(2 * state.limits.l2_bytes, 64 * 2**20)
    a_ms, b_ms = time_interleaved([twin, base.fn], flush_bytes=flush_bytes, warmup=job.get("warmup", 10),
                                  iters=job.get("iters", 50), trials=job.get("timing_trials", 3))
    return {"status": "PASSED", "timing": timing_record(wl, a_ms, b_ms, primary, {}, ceil, state.limits.name, False),
            "correctness": [], "plan_errors": [], "runtime_error": "", "seconds": {}}, False
