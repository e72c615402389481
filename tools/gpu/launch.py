"""Load a cubin with the driver API and launch a resolved plan's kernels with cuLaunchKernelEx.

One `check()` around every driver call turns a CUresult into a CudaError carrying the error's name
(CUDA_ERROR_ILLEGAL_ADDRESS ...) and the driver's sentence. Parameters are packed once per buffer
set into a ctypes `void*[]` (pointers as u64, scalars by type, tensor maps as their 128 bytes), so
a timed launch costs one driver call.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from cuda.bindings import driver as cu

from ..solution.plan import ResolvedLaunch

SCALAR_CTYPES = {"i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
                 "f32": ctypes.c_float, "f64": ctypes.c_double}
# Errors after which the context is unusable: the worker reports them and is replaced.
STICKY = {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_MISALIGNED_ADDRESS",
          "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
          "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ECC_UNCORRECTABLE",
          "CUDA_ERROR_UNKNOWN", "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_NVLINK_UNCORRECTABLE"}
# Sticky errors the hardware reports for itself: the machine's fault, never a kernel's verdict.
HARDWARE_FAULTS = {"CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_NVLINK_UNCORRECTABLE"}


class CudaError(RuntimeError):
    def __init__(self, name: str, text: str, what: str):
        super().__init__(f"{name} ({text}) in {what}")
        self.name, self.text, self.what = name, text, what

    @property
    def sticky(self) -> bool:
        return self.name in STICKY


def check(result, what: str):
    """Unpack a cuda.bindings result tuple; raise CudaError on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, text = cu.cuGetErrorString(err)
        raise CudaError(err.name, text.decode() if isinstance(text, bytes) else str(text), what)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass
class FunctionInfo:
    name: str
    handle: object
    registers: int
    static_smem: int
    max_threads: int
    param_sizes: list[int]
    local_bytes: int = 0  # per thread: the kernel's stack frame and spills


def load_module(cubin: bytes):
    return check(cu.cuModuleLoadData(cubin), "cuModuleLoadData")


def unload_module(module) -> None:
    cu.cuModuleUnload(module)


def _attr(fn, attr) -> int:
    return int(check(cu.cuFuncGetAttribute(attr, fn), f"cuFuncGetAttribute({attr.name})"))


# ptxas takes up to 32764 bytes of kernel parameters (0x7ffc), a parameter at least one byte: read that many at most,
# never fewer than a kernel may have (8000 i32 parameters assemble).
MAX_KERNEL_PARAMS = 32764


def param_sizes(fn) -> list[int]:
    sizes = []
    for i in range(MAX_KERNEL_PARAMS):
        err, _offset, size = cu.cuFuncGetParamInfo(fn, i)
        if err != cu.CUresult.CUDA_SUCCESS:
            break
        sizes.append(int(size))
    return sizes


def get_function(module, name: str) -> FunctionInfo:
    fn = check(cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")
    A = cu.CUfunction_attribute
    return FunctionInfo(
        name=name,
        handle=fn,
        registers=_attr(fn, A.CU_FUNC_ATTRIBUTE_NUM_REGS),
        static_smem=_attr(fn, A.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
        max_threads=_attr(fn, A.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        param_sizes=param_sizes(fn),
        local_bytes=_attr(fn, A.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
    )


def stack_limit() -> int:
    """The context's per-thread stack size (CU_LIMIT_STACK_SIZE): local memory any kernel's threads can address."""
    return int(check(cu.cuCtxGetLimit(cu.CUlimit.CU_LIMIT_STACK_SIZE), "cuCtxGetLimit(CU_LIMIT_STACK_SIZE)"))


def set_dynamic_smem(info: FunctionInfo, nbytes: int) -> None:
    check(cu.cuFuncSetAttribute(info.handle, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                nbytes), f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) for {info.name}")


@dataclass
class PackedParams:
    """The void*[] for one launch; keeps every referenced buffer alive."""

    keep: list = field(default_factory=list)
    array: object = None

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)


def pack_params(launch: ResolvedLaunch, pointers: dict[str, int], tmaps: dict[str, cu.CUtensorMap]) -> PackedParams:
    packed = PackedParams()
    addresses = []
    for arg in launch.args:
        if arg.kind in ("tensor", "scratch"):
            value = ctypes.c_uint64(pointers[arg.name])
            packed.keep.append(value)
            addresses.append(ctypes.addressof(value))
        elif arg.kind == "tmap":
            tmap = tmaps[arg.name]
            packed.keep.append(tmap)
            addresses.append(int(tmap.getPtr()))
        else:
            value = SCALAR_CTYPES[arg.type or "i32"](arg.value)
            packed.keep.append(value)
            addresses.append(ctypes.addressof(value))
    packed.array = (ctypes.c_void_p * max(1, len(addresses)))(*addresses)
    return packed


def launch_config(launch: ResolvedLaunch, stream: int) -> cu.CUlaunchConfig:
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = launch.grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = launch.block
    cfg.sharedMemBytes = launch.smem
    cfg.hStream = cu.CUstream(stream)
    if launch.cluster is not None:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = launch.cluster
        cfg.attrs = [attr]
        cfg.numAttrs = 1
    else:
        cfg.numAttrs = 0
    return cfg


def launch_kernel(cfg: cu.CUlaunchConfig, info: FunctionInfo, params: PackedParams) -> None:
    check(cu.cuLaunchKernelEx(cfg, info.handle, params.address, 0), f"cuLaunchKernelEx({info.name})")


def launch_1d(info: FunctionInfo, grid: int, block: int, smem: int, stream: int, values: list) -> None:
    """One launch of a harness kernel: a 1-D grid, `values` its arguments as ctypes scalars in order."""
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
    cfg.sharedMemBytes, cfg.hStream, cfg.numAttrs = smem, cu.CUstream(stream), 0
    params = PackedParams(keep=list(values))
    params.array = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
    launch_kernel(cfg, info, params)


def sync_stream(stream: int) -> None:
    check(cu.cuStreamSynchronize(cu.CUstream(stream)), "kernel execution (cuStreamSynchronize)")
