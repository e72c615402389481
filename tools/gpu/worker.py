"""The GPU worker: one long-lived process per GPU that owns the CUDA context.

Protocol over a multiprocessing Connection (plain dicts; the job and the result are the fields of the typed
models in messages.py, validated at both ends):
  worker -> parent  {"type": "hello", "limits", "fingerprint", "device_count"}  or  {"type": "hello", "error"}
  parent -> worker  GpuJob's fields ("type": "evaluate" | "aa", "id", "workload", "cubin", "plan", ...)
  worker -> parent  {"type": "phase", "id", "phase", "limit_s", "why"}   (the watchdog's deadline for what comes
                    next, and how that limit was reached: watchdog.py)
                    {"type": "result", "id", "result": GpuOutcome's fields, "replace", "cache"}
  parent -> worker  {"type": "ping"} -> {"type": "pong"};  {"type": "exit"}
After a result with replace=True (a sticky CUDA error) the worker exits; the pool starts another.
"""
from __future__ import annotations

import time
import traceback

from .limits import DeviceLimits


def read_limits(device_index: int) -> DeviceLimits:
    import torch
    from cuda.bindings import driver as cu

    from .launch import check

    dev = check(cu.cuDeviceGet(device_index), "cuDeviceGet")
    A = cu.CUdevice_attribute

    def attr(a) -> int:
        return int(check(cu.cuDeviceGetAttribute(a, dev), f"cuDeviceGetAttribute({a.name})"))

    props = torch.cuda.get_device_properties(device_index)
    max_smem_optin = attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    try:  # the `max_clusters` plan symbol; without it plans get the proven bound (plan_resolve.guaranteed_clusters)
        from .occupancy import measure_cluster_capacity

        capacity = measure_cluster_capacity(max_smem_optin)
    except Exception:  # noqa: BLE001 - a driver without the occupancy call must not stop the worker
        capacity = {}
    return DeviceLimits(
        name=props.name,
        sm_count=attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        max_threads_per_block=attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        max_threads_per_sm=attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
        max_block=(attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
                   attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)),
        max_grid=(attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
                  attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)),
        max_smem_optin=max_smem_optin,
        max_cluster_size=8,
        l2_bytes=attr(A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
        total_memory=props.total_memory,
        cluster_capacity=capacity,
        pageable_memory_access=bool(_optional_attr(attr, "CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS")),
    )


def _optional_attr(attr, name: str) -> int:
    """An attribute an older driver binding may lack: 0 then."""
    from cuda.bindings import driver as cu

    a = getattr(cu.CUdevice_attribute, name, None)
    try:
        return attr(a) if a is not None else 0
    except Exception:  # noqa: BLE001 - a driver that refuses the attribute does not have the feature
        return 0


def _start(device_index: int, config: dict, referee_conn):
    t_start = time.perf_counter()
    started_at = time.time()  # wall clock: the pool tells from it how long the process took to get here
    import torch
    from cuda.bindings import driver as cu

    from . import fingerprint
    from .referee import RefereeClient
    from .state import WorkerState

    phases = {"imports": time.perf_counter() - t_start}  # where a worker's start goes (the bench prints it)
    mark = time.perf_counter()

    def done(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases[name] = now - mark
        mark = now

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU is visible to torch (torch.cuda.is_available() is False)")
    torch.cuda.set_device(device_index)
    torch.zeros(1, device="cuda")  # creates the primary context, which the driver API calls then use
    cu.cuInit(0)
    done("context")
    limits = read_limits(device_index)
    done("limits")
    _warm_up()
    done("warm_up")
    state = WorkerState(device_index, limits, config.get("cache_share", 0.4), config.get("ceilings"))
    if referee_conn is None:
        raise RuntimeError("the GPU worker was started without its referee process")
    state.referee = RefereeClient(referee_conn, config.get("referee_timeout_s", 900.0))
    done("state")
    identity = fingerprint.read(device_index) | {"pageable_memory_access": limits.pageable_memory_access}
    done("fingerprint")
    hello = {"type": "hello", "limits": limits.model_dump(), "fingerprint": identity,
             "device_count": torch.cuda.device_count(), "startup_s": time.perf_counter() - t_start,
             "startup_phases": {k: round(v, 3) for k, v in phases.items()}, "started_at": started_at}
    return state, hello


def _warm_up() -> None:
    """Load cuBLAS and the harness's own torch kernels now, so a fresh worker (a spare) is as fast as an old one."""
    import torch

    from ...workloads.schema import Tolerance
    from .buffers import allocate_set, count_poison
    from .correctness import compare, output_digest

    a = torch.ones(256, 256, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, a)
    bufs = allocate_set([("A", (64, 64), "bfloat16", "input"), ("C", (64, 64), "bfloat16", "output")],
                        [("s", [64], "float32", True)])
    bufs.load_inputs({"A": a[:64, :64]})
    bufs.damaged_guards()
    out = bufs.tensors["C"].data
    compare(out, a[:64, :64].float(), Tolerance(), trial=0, tensor="C", unwritten=count_poison(out))
    output_digest(out)
    torch.equal(out, a[:64, :64])
    torch.randn(64, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    torch.cuda.synchronize()


def _infra(message: str) -> dict:
    from .messages import GpuOutcome

    return GpuOutcome(status="INFRA_ERROR", message=message).model_dump()


def serve(conn, device_index: int, config: dict, referee_conn=None) -> None:
    try:
        state, hello = _start(device_index, config, referee_conn)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which names what is missing
        conn.send({"type": "hello", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        return
    conn.send(hello)
    from .messages import GpuJob
    from .runner import aa_job, evaluate_job

    handlers = {"evaluate": evaluate_job, "aa": aa_job}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        kind = msg.get("type")
        if kind == "exit":
            return
        if kind == "ping":
            conn.send({"type": "pong", "cache": state.cache.stats()})
            continue
        job_id = msg.get("id")

        def phase(name: str, limit_s: float, why: str = "", _id=job_id) -> None:
            conn.send({"type": "phase", "id": _id, "phase": name, "limit_s": float(limit_s), "why": why})

        try:
            job = GpuJob.model_validate(msg)
            if job.ceilings and not state.ceilings:
                state.ceilings = dict(job.ceilings)
            outcome, replace = handlers[kind](state, job, phase)
            result = outcome.model_dump()
        except Exception:  # noqa: BLE001 - a harness bug (or the referee's): reported, and the worker is replaced
            result, replace = _infra("the GPU worker failed:\n" + traceback.format_exc(limit=8)), True
        state.jobs += 1
        conn.send({"type": "result", "id": job_id, "result": result, "replace": replace, "cache": state.cache.stats()})
        if replace:
            return
