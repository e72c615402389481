"""How many thread-block clusters of each size are resident at once on this GPU (the `max_clusters`
plan symbol), asked of the driver: cuOccupancyMaxActiveClusters for a probe kernel that takes all the
dynamic shared memory a block may have, so each CTA fills one SM, as a persistent kernel's CTA does.

The worker puts the result in DeviceLimits.cluster_capacity when it starts, and the evaluator and the
profile replay pass it to resolve_plan(cluster_capacity=...); a size the probe could not measure gets
plan_resolve.guaranteed_clusters, a bound that tests/prompts/test_prompt_contract.py checks against these
measured figures on the GPU.
"""
from __future__ import annotations

from cuda.bindings import driver as cu

from .launch import check

PROBE_PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry ptxbench_cluster_probe()
{
    ret;
}
\0"""


def measure_cluster_capacity(max_smem_optin: int, sizes: range = range(1, 9), threads: int = 128) -> dict[int, int]:
    """{cluster size: clusters resident at once with one CTA per SM} in the current CUDA context."""
    module = check(cu.cuModuleLoadData(PROBE_PTX), "cuModuleLoadData(cluster probe)")
    try:
        fn = check(cu.cuModuleGetFunction(module, b"ptxbench_cluster_probe"), "cuModuleGetFunction(cluster probe)")
        check(cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    max_smem_optin), "cuFuncSetAttribute(probe smem)")
        out = {}
        for size in sizes:
            cfg = cu.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = size * 64, 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
            cfg.sharedMemBytes = max_smem_optin
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = size, 1, 1
            cfg.attrs = [attr]
            cfg.numAttrs = 1
            out[size] = int(check(cu.cuOccupancyMaxActiveClusters(fn, cfg), f"cuOccupancyMaxActiveClusters({size})"))
        return out
    finally:
        cu.cuModuleUnload(module)
