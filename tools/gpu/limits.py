"""Device limits and the checks a resolved launch plan must pass before anything is launched.

Pure logic (no CUDA import): the worker fills `DeviceLimits` from the driver once, and
`check_plan` returns one message per violated limit, each naming the limit and both numbers, so
a PLAN_ERROR tells the model exactly what to change. Checks that need the loaded function
(registers, static shared memory, parameter sizes) are in `check_function`.
"""
from __future__ import annotations

import math

from pydantic import BaseModel, Field

from ..solution.plan import ResolvedPlan, ResolvedTensorMap

SCALAR_BYTES = {"i32": 4, "u32": 4, "i64": 8, "u64": 8, "f32": 4, "f64": 8}
ARG_BYTES = {"tensor": 8, "scratch": 8, "tmap": 128}
SWIZZLE_SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
ELEM_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int64": 8, "uint8": 1}
NAN_FILL_DTYPES = ("bfloat16", "float16", "float32")  # the driver's NaN out-of-bounds fill is for floating-point data


class DeviceLimits(BaseModel):
    """What one GPU allows; defaults are Hopper's (H100 / H200)."""

    name: str = "NVIDIA H200"
    sm_count: int = 132
    max_threads_per_block: int = 1024
    max_threads_per_sm: int = 2048
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_smem_optin: int = 232448
    max_cluster_size: int = 8
    l2_bytes: int = 50 * 2**20
    total_memory: int = 80 * 2**30
    cluster_capacity: dict[int, int] = Field(
        default_factory=dict, description="cluster size -> clusters resident at once, one CTA per SM "
        "(tools/gpu/occupancy.py); empty: plans get plan_resolve.guaranteed_clusters")
    pageable_memory_access: bool = Field(False, description="the GPU reads and writes its process's pageable host memory "
                                         "by address (HMM, or ATS on Grace Hopper): a candidate's kernel reaches the "
                                         "worker's host memory (tools/gpu/keyless.py erases the keys from it)")


def arg_bytes(kind: str, scalar_type: str | None) -> int:
    return SCALAR_BYTES[scalar_type or "i32"] if kind == "scalar" else ARG_BYTES[kind]


def _check_launch_shape(i: int, launch, lim: DeviceLimits) -> list[str]:
    where = f"launch {i + 1} ({launch.kernel})"
    errs: list[str] = []
    threads = math.prod(launch.block)
    if threads > lim.max_threads_per_block:
        errs.append(f"{where}: block {list(launch.block)} has {threads} threads; the device allows at most "
                    f"{lim.max_threads_per_block} threads per block")
    for axis, (b, mb, g, mg) in enumerate(zip(launch.block, lim.max_block, launch.grid, lim.max_grid)):
        name = "xyz"[axis]
        if b < 1 or g < 1:
            errs.append(f"{where}: grid {list(launch.grid)} and block {list(launch.block)} must be >= 1 in every dimension")
            break
        if b > mb:
            errs.append(f"{where}: block.{name} = {b} exceeds the device's maximum block dimension {mb}")
        if g > mg:
            errs.append(f"{where}: grid.{name} = {g} exceeds the device's maximum grid dimension {mg}")
    if launch.smem < 0 or launch.smem > lim.max_smem_optin:
        errs.append(f"{where}: dynamic shared memory {launch.smem} bytes exceeds the device's opt-in limit of "
                    f"{lim.max_smem_optin} bytes per block")
    if launch.cluster is not None:
        size = math.prod(launch.cluster)
        if size > lim.max_cluster_size or min(launch.cluster) < 1:
            errs.append(f"{where}: cluster {list(launch.cluster)} has {size} CTAs; the portable cluster size limit is "
                        f"{lim.max_cluster_size}")
        for axis, (g, c) in enumerate(zip(launch.grid, launch.cluster)):
            if c >= 1 and g % c:
                errs.append(f"{where}: grid.{'xyz'[axis]} = {g} is not a multiple of cluster.{'xyz'[axis]} = {c}")
    return errs


def check_tmap(t: ResolvedTensorMap, nbytes_of_target: int | None) -> list[str]:
    """cuTensorMapEncodeTiled's rules, checked here so the model gets a sentence instead of CUDA_ERROR_INVALID_VALUE."""
    where = f"tmap {t.name} (tensor {t.tensor})"
    errs: list[str] = []
    esize = ELEM_BYTES[t.dtype]
    if not 1 <= t.rank <= 5:
        errs.append(f"{where}: rank {t.rank}; TMA supports 1 to 5 dimensions")
    if not (len(t.dims) == len(t.box) == len(t.elem_strides) == t.rank and len(t.byte_strides) == t.rank - 1):
        errs.append(f"{where}: dims, box and elem_strides need {t.rank} entries and strides {t.rank - 1}")
        return errs
    for i, b in enumerate(t.box):
        if not 1 <= b <= 256:
            errs.append(f"{where}: box[{i}] = {b}; each box dimension must be between 1 and 256")
    if (t.box[0] * esize) % 16:
        errs.append(f"{where}: the inner box dimension is {t.box[0] * esize} bytes; it must be a multiple of 16 bytes")
    for i, s in enumerate(t.byte_strides):
        if s % 16:
            errs.append(f"{where}: stride of dimension {i + 1} is {s} bytes; TMA global strides must be multiples of 16")
    for i, e in enumerate(t.elem_strides):
        if not 1 <= e <= 8:
            errs.append(f"{where}: elem_strides[{i}] = {e}; must be between 1 and 8")
    if t.oob_fill == "nan" and t.dtype not in NAN_FILL_DTYPES:
        errs.append(f"{where}: oob_fill nan needs a floating-point tensor, not {t.dtype}")
    span = SWIZZLE_SPAN[t.swizzle]
    if span is not None and t.box[0] * esize > span:
        errs.append(f"{where}: inner box of {t.box[0] * esize} bytes is wider than the {t.swizzle} swizzle span "
                    f"({span} bytes); use box[0] <= {span // esize}")
    if any(d < 1 for d in t.dims):
        errs.append(f"{where}: dims {t.dims} must all be >= 1")
    elif nbytes_of_target is not None and t.rank >= 1:
        extent = (t.dims[0]) * esize + sum((d - 1) * s for d, s in zip(t.dims[1:], t.byte_strides))
        if extent > nbytes_of_target:
            errs.append(f"{where}: the view (dims {t.dims}, strides {t.strides}) spans {extent} bytes but the buffer "
                        f"has {nbytes_of_target} bytes")
    return errs


def check_plan(plan: ResolvedPlan, lim: DeviceLimits, buffer_bytes: dict[str, int]) -> list[str]:
    """Every device-limit violation of the plan (empty when it may be launched)."""
    errs: list[str] = []
    if not plan.launches:
        errs.append("the plan has no launches")
    for i, launch in enumerate(plan.launches):
        errs += _check_launch_shape(i, launch, lim)
        for j, arg in enumerate(launch.args):
            if arg.kind in ("tensor", "scratch") and arg.name not in buffer_bytes:
                errs.append(f"launch {i + 1} ({launch.kernel}): argument {j + 1} names unknown {arg.kind} {arg.name!r}")
            if arg.kind == "tmap" and arg.name not in {t.name for t in plan.tmaps}:
                errs.append(f"launch {i + 1} ({launch.kernel}): argument {j + 1} names unknown tmap {arg.name!r}")
    for t in plan.tmaps:
        errs += check_tmap(t, buffer_bytes.get(t.tensor))
    return errs


def check_function(launch, index: int, regs: int, static_smem: int, max_threads: int, param_sizes: list[int],
                   lim: DeviceLimits) -> list[str]:
    """Limits that depend on the compiled function (from cuFuncGetAttribute / cuFuncGetParamInfo)."""
    where = f"launch {index + 1} ({launch.kernel})"
    errs: list[str] = []
    threads = math.prod(launch.block)
    if threads > max_threads:
        errs.append(f"{where}: block of {threads} threads, but with {regs} registers per thread the kernel can run "
                    f"at most {max_threads} threads per block")
    errs += _check_total_smem(where, static_smem, launch.smem, lim)
    plan_sizes = [arg_bytes(a.kind, a.type) for a in launch.args]
    if len(plan_sizes) != len(param_sizes):
        errs.append(f"{where}: the kernel takes {len(param_sizes)} parameters (sizes in bytes {param_sizes}) but the "
                    f"plan passes {len(plan_sizes)} arguments (sizes {plan_sizes})")
    else:
        for j, (want, got) in enumerate(zip(param_sizes, plan_sizes)):
            if want != got:
                a = launch.args[j]
                errs.append(f"{where}: argument {j + 1} ({a.kind} {a.name!r}) is {got} bytes but the kernel's parameter "
                            f"{j + 1} is {want} bytes")
    return errs


def _check_total_smem(where: str, static_smem: int, dynamic_smem: int, lim: DeviceLimits) -> list[str]:
    if static_smem + dynamic_smem <= lim.max_smem_optin:
        return []
    return [f"{where}: static ({static_smem}) + dynamic ({dynamic_smem}) shared memory = {static_smem + dynamic_smem} "
            f"bytes exceeds the opt-in limit of {lim.max_smem_optin} bytes"]


def check_compiled(plan: ResolvedPlan, static_smem: dict[str, int], lim: DeviceLimits) -> list[str]:
    """The part of check_function a machine without a GPU can do, from ptxas's figures (kernel -> static shared
    memory): each launch's static + dynamic shared memory against the opt-in limit. A static __shared__ variable
    beside a 1024-aligned dynamic area costs 1024 bytes, which a plan sized to the limit no longer has."""
    return [e for i, launch in enumerate(plan.launches) if launch.kernel in static_smem
            for e in _check_total_smem(f"launch {i + 1} ({launch.kernel})", static_smem[launch.kernel], launch.smem, lim)]


# Share of the GPU's memory one candidate's buffers may take: the rest holds the library baselines, the referee's
# references (in its own context) and the worker's temporaries.
CANDIDATE_MEMORY_SHARE = 0.5


# What a worker keeps of a candidate's local memory: up to this much the driver's reservation stays for the next
# candidate (the 1 KB default stack alone reserves 277 MB on an H200); above it the worker is replaced after the
# evaluation, since a context never gives local memory back.
LOCAL_KEEP_BYTES = 2**30
# The most memory any Hopper part carries (GH200's 144 GB of HBM3e; an H200 reports 140 GiB, an H100 80 GiB): without a
# GPU, only what this could not hold is sure to be refused by every worker (evaluate._plan_issues_without_gpu).
LARGEST_HOPPER_MEMORY = 144 * 2**30


def local_reservation(frame: int, lim: DeviceLimits) -> int:
    """The device memory the driver reserves for a per-thread local frame of `frame` bytes: one frame for every
    thread the GPU can hold at once (2048 per SM), taken at the first launch that needs it and kept while the
    context lives (since CUDA 11 the driver never shrinks it). A `.local` array the kernel hardly touches costs it
    whole: 128 KB a thread is 35 GB on an H200."""
    return int(frame) * lim.max_threads_per_sm * lim.sm_count


def plan_bytes(tensors: dict[str, tuple[str, list[int]]], plan: ResolvedPlan) -> dict[str, int]:
    """Bytes of each workload tensor (name -> (dtype, shape)) and each scratch buffer of the plan, as the worker sizes
    them for check_memory (no torch: no-GPU mode asks too)."""
    sizes = {name: math.prod(shape) * ELEM_BYTES[dtype] for name, (dtype, shape) in tensors.items()}
    sizes.update({s.name: s.nbytes for s in plan.scratch})
    return sizes


def check_memory(buffer_bytes: dict[str, int], input_bytes: int, n_sets: int, lim: DeviceLimits,
                 module_bytes: int = 0, local_bytes: int = 0, gpu: str = "this GPU") -> list[str]:
    """The buffers of every input set (tensors + scratch + guard zones), the pristine inputs, the module's own
    globals and constants (allocated by the driver when it loads the cubin, outside every allocator: a
    `.global .b8 big[1 << 35]` assembles to a few KB) and the local memory its kernels' frames make the driver
    reserve (`local_bytes`: local_reservation) must fit the GPU."""
    guard = 2 * 64 * 1024 * len(buffer_bytes)
    need = n_sets * (sum(buffer_bytes.values()) + guard + input_bytes) + module_bytes + local_bytes
    allowed = int(lim.total_memory * CANDIDATE_MEMORY_SHARE)
    if need <= allowed:
        return []
    sized = {**{n: b for n, b in buffer_bytes.items() if b > 2**30},
             **({"the module's globals": module_bytes} if module_bytes > 2**30 else {}),
             **({"the kernels' local memory (per-thread frame x every thread the GPU holds)": local_bytes}
                if local_bytes > 2**30 else {})}
    big = ", ".join(f"{n} {b / 2**30:.1f} GiB" for n, b in sorted(sized.items(), key=lambda x: -x[1])[:4])
    return [f"the plan's buffers and the module's globals need {need / 2**30:.1f} GiB for the {n_sets} input sets an "
            f"evaluation uses, more than the {allowed / 2**30:.1f} GiB a candidate may take on {gpu} "
            f"({lim.total_memory / 2**30:.0f} GiB)" + (f"; largest: {big}" if big else "")]
