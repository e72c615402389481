"""A worker and its referee in this process, for measurement scripts that patch the protocol (bench/timing_*.py).

`in_process_worker()` sets up the CUDA context, the device limits, a WorkerState and a referee process, and
`job_for(...)` compiles and resolves a solution into the GpuJob that runner.evaluate_job takes, as the pool would.
"""
from __future__ import annotations

import multiprocessing as mp
from contextlib import contextmanager
from typing import Iterator

from .messages import GpuJob


@contextmanager
def in_process_worker(device: int = 0) -> Iterator:
    """A WorkerState on `device` with its referee running; the referee stops when the block ends."""
    import torch
    from cuda.bindings import driver as cu

    from .entry import referee_main
    from .referee import RefereeClient
    from .state import WorkerState
    from .worker import read_limits

    torch.cuda.set_device(device)
    torch.zeros(1, device="cuda")
    cu.cuInit(0)
    state = WorkerState(device, read_limits(device))
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=referee_main, args=(theirs, device), daemon=True)
    proc.start()
    state.referee = RefereeClient(mine)
    try:
        yield state
    finally:
        mine.send({"op": "exit"})
        proc.join(timeout=30)


def job_for(source: str, workload: str, state, arch: str = "sm_90a", **fields) -> GpuJob:
    """The evaluate job for a solution file, compiled and resolved for this worker's GPU."""
    from ...workloads.registry import get_workload
    from ..compile import compile_source
    from ..evaluate import error_summary, read_cubin
    from ..solution.parse import parse_solution, resolve_plan

    wl = get_workload(workload)
    sol = parse_solution(source, wl, arch)
    if isinstance(sol, list):
        raise ValueError("solution refused: " + "; ".join(str(i) for i in sol))

    def compile_it():
        return compile_source(sol.source, sol.language, arch, wl)

    comp = compile_it()
    if comp.status != "ok" or not comp.cubin_path:
        raise ValueError("solution does not compile: " + error_summary(comp.errors))
    plan = resolve_plan(sol.plan, wl, state.limits.sm_count, arch, cluster_capacity=state.limits.cluster_capacity)
    # the evaluator's rule: a cubin a prune or `ptxbench cache --clear` took from the cache is compiled once more
    cubin, comp, gone = read_cubin(comp, compile_it)
    if cubin is None:
        raise RuntimeError(f"the compiled cubin is gone from the compile cache ({gone})")
    return GpuJob(workload=workload, cubin=cubin, plan=plan.model_dump(), **fields)
