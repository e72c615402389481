"""Encode a resolved TMA descriptor with cuTensorMapEncodeTiled (FACTS.md: sizes as cuuint64_t /
cuuint32_t, the result passed by value as a 128-byte kernel parameter)."""
from __future__ import annotations

from cuda.bindings import driver as cu

from ..solution.plan import ResolvedTensorMap
from .launch import check

DTYPES = {
    "bfloat16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    "float16": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    "float32": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    "int32": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_INT32,
    "int64": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_INT64,
    "uint8": cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
}
SWIZZLES = {
    "none": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
    "32B": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
    "64B": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
    "128B": cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
}
L2_PROMOTION = {
    "none": cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
    "64B": cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
    "128B": cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
    "256B": cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
}
OOB_FILL = {
    "zero": cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    "nan": cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA,
}


def encode(t: ResolvedTensorMap, address: int) -> cu.CUtensorMap:
    """The CUtensorMap for tensor map `t` over the buffer at device `address` (raises CudaError)."""
    return check(
        cu.cuTensorMapEncodeTiled(
            DTYPES[t.dtype],
            t.rank,
            address,
            [cu.cuuint64_t(d) for d in t.dims],
            [cu.cuuint64_t(s) for s in t.byte_strides],
            [cu.cuuint32_t(b) for b in t.box],
            [cu.cuuint32_t(e) for e in t.elem_strides],
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            SWIZZLES[t.swizzle],
            L2_PROMOTION[t.l2_promotion],
            OOB_FILL[t.oob_fill],
        ),
        f"cuTensorMapEncodeTiled({t.name})",
    )
