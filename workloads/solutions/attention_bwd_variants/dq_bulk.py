"""The first dQ reductions through shared memory: bulk_dq (the 128-wide kernels' dQ by one bulk reduce-add per query
block), bulk_dq_s3 (with a 3-deep Q / dO ring) and bulk_dq_d64 (D = 64's dQ by bulk reductions too)."""
from __future__ import annotations

import re

from .edits import apply_edits

# bulk_dq's dQ store in the 128-wide kernels and bulk_dq_d64's at D = 64, which dq_tiles rewrites.
DQ_STORE_128 = """  if constexpr (HD == 128) {  // both consumers' column halves into sdQ ([64][D] fp32), then one bulk reduction
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const int d = dcol0 + 8 * (j / 4) + col0;
      if (d < D) sts64(sdQ + (r + 8 * ((j / 2) % 2)) * D + d, dq[j], dq[j + 1]);
    }
    fence_proxy_async();
    named_barrier_sync(2, 256);
    if (issuer) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, sdQ, BM * D * 4);
    return;
  }
"""
DQ_TILE_64 = """  // HD = 64: this consumer's partial (its own keys, every column) into its own tile, reduced by its thread 0
  float* tile = sdQ + c * BM * 64;
#pragma unroll
  for (int j = 0; j < 32; j += 2) sts64(tile + (r + 8 * ((j / 2) % 2)) * 64 + 8 * (j / 4) + col0, dq[j], dq[j + 1]);
  fence_proxy_async();
  named_barrier_sync(3 + c, 128);  // this consumer's rows are in its tile
  if (t == 0) bulk_reduce_add(dq_rows + static_cast<size_t>(q0) * D, tile, BM * 64 * 4);"""

BULK_DQ = [
    ("// Hopper (sm_90a) attention backward with TMA + wgmma,",
     "// VARIANT bulk_dq (attention_bwd_variants.py): dQ by one bulk reduction per query block.\n//\n"
     "// Hopper (sm_90a) attention backward with TMA + wgmma,"),
    ('smem = "1024 + 32768 * 2 + 2 * (16384 * 2 + 512) + 16384 * 2 + 256"  '
     '# slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, mbarriers',
     'smem = "1024 + 32768 * 2 + 2 * (16384 * 2 + 512) + 16384 * 2 + 32768 + 256"  '
     '# slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers'),
    ("// D[64 x 128] += A[64 x 16] (registers, bf16 pairs)", """\
// Shared-memory accesses by 32-bit shared addresses (the generic ones cost an address-space check each).
__device__ __forceinline__ float2 lds64(const float* p) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(smem_u32(p)));
  return v;
}
__device__ __forceinline__ void sts32(const void* p, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" :: "r"(smem_u32(p)), "r"(v) : "memory");
}
__device__ __forceinline__ void sts64(const void* p, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(smem_u32(p)), "f"(x), "f"(y) : "memory");
}

// dst[0 .. bytes) += src (fp32, global <- shared), in this thread's bulk group.
__device__ __forceinline__ void bulk_reduce_add(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
               :: "l"(reinterpret_cast<uint64_t>(dst)), "r"(smem_u32(src)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// D[64 x 128] += A[64 x 16] (registers, bf16 pairs)"""),
    ("                                               float (&dk)[HD / 2], float* __restrict__ dq_rows, int D, float sl2) {",
     "                                               float (&dk)[HD / 2], float* __restrict__ dq_rows, int D, float sl2,\n"
     "                                               float* sdQ, bool issuer) {"),
    ("""#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int q = 8 * (j / 4) + col0 + (j % 2);
    float e = ex2(fmaf(s[j], sl2, -sL2[q]));""", """\
  // the 16 query columns of this thread: pairs (8a + col0, + 1), a = 0..7, for L2 and Dr
  float2 l2[8], dr[8];
#pragma unroll
  for (int a = 0; a < 8; ++a) l2[a] = lds64(sL2 + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int q = 8 * (j / 4) + col0 + (j % 2);
    float e = ex2(fmaf(s[j], sl2, -(j % 2 ? l2[j / 4].y : l2[j / 4].x)));"""),
    ("  for (int j = 0; j < 32; ++j) p[j] = s[j] * (p[j] - sDr[8 * (j / 4) + col0 + (j % 2)]);", """\
  for (int a = 0; a < 8; ++a) dr[a] = lds64(sDr + 8 * a + col0);
#pragma unroll
  for (int j = 0; j < 32; ++j) p[j] = s[j] * (p[j] - (j % 2 ? dr[j / 4].y : dr[j / 4].x));"""),
    ("    *reinterpret_cast<uint32_t*>(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2) = ds[i];",
     "    sts32(buf + row * 128 + (((q / 8) ^ (row % 8)) * 16) + (q % 8) * 2, ds[i]);"),
    ("  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf`", """\
  if (HD == 128 && issuer) bulk_wait_read();  // the previous block's dQ reduction has read sdQ
  named_barrier_sync(1, 256);  // both consumers' dS^T rows are in `buf` (and sdQ is free again)"""),
    ("""  const int dcol0 = HD == 128 ? 64 * c : 0;
#pragma unroll""", "  const int dcol0 = HD == 128 ? 64 * c : 0;\n" + DQ_STORE_128 + "#pragma unroll"),
    ("  float* sL2 = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // STAGES x 64", """\
  float* sdQ = reinterpret_cast<float*>(sdS + 2 * DS_BYTES);  // HD = 128: 64 x D fp32
  float* sL2 = sdQ + (HD == 128 ? BM * HD : 0);                // STAGES x 64"""),
    ("""                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2);
    }""", """\
                                 dQacc + static_cast<size_t>(head) * S * D, D, sl2, sdQ, threadIdx.x == 128);
    }
    if (HD == 128 && threadIdx.x == 128) bulk_wait_all();  // the last reductions are done before the CTA exits"""),
]

STAGES_3 = [
    ("// VARIANT bulk_dq (attention_bwd_variants.py): dQ by one bulk reduction per query block.",
     "// VARIANT bulk_dq_s3 (attention_bwd_variants.py): dQ by one bulk reduction per query block, and a\n"
     "// 3-deep Q / dO ring for the 128-wide kernels."),
    ('smem = "1024 + 32768 * 2 + 2 * (16384 * 2 + 512) + 16384 * 2 + 32768 + 256"  '
     '# slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers',
     'smem = "1024 + 32768 * 2 + 3 * (16384 * 2 + 512) + 16384 * 2 + 32768 + 256"  '
     '# slack, K, V, 3 x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers'),
    ("constexpr int STAGES = 2;", """\
// Q / dO ring depth: 3 for the 128-wide kernels (the shared memory allows it with the dQ buffer), 2 for D = 64.
template <int HD>
struct Stages {
  static constexpr int N = HD == 128 ? 3 : 2;
};"""),
]


BULK_DQ_D64 = [
    ('smem = "1024 + 32768 * 2 + 3 * (16384 * 2 + 512) + 16384 * 2 + 32768 + 256"  '
     '# slack, K, V, 3 x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers',
     'smem = "1024 + 512 * (cdiv(D, 64) * 64) + (1 + cdiv(D, 64)) * (256 * (cdiv(D, 64) * 64) + 512) + 16384 * 2 + '
     '32768 + 256"  # slack, K, V, STAGES x (Q, dO, L2, Dr), 2 x dS, dQ, mbarriers (64 or 128 wide; 2 or 3 stages)'),
    ("  float* sL2 = sdQ + (HD == 128 ? BM * HD : 0);                // Stages<HD>::N x 64",
     "  float* sL2 = sdQ + BM * 128;  // dQ: HD = 128 one [64][D] tile, HD = 64 one [64][64] tile per consumer"),
    ("  if (HD == 128 && issuer) bulk_wait_read();  // the previous block's dQ reduction has read sdQ",
     "  if (t == 0 && (HD == 64 || issuer)) bulk_wait_read();  // this thread's previous dQ reduction has read its tile"),
    ("""#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int d = dcol0 + 8 * (j / 4) + col0;
    if (d < D) {
      float* dst = dq_rows + static_cast<size_t>(q0 + r + 8 * ((j / 2) % 2)) * D + d;
      atomicAdd(reinterpret_cast<float2*>(dst), make_float2(dq[j], dq[j + 1]));
    }
  }
}""",
     DQ_TILE_64 + "\n}"),
    ("    if (HD == 128 && threadIdx.x == 128) bulk_wait_all();  // the last reductions are done before the CTA exits",
     "    if (threadIdx.x == 128 || (HD == 64 && threadIdx.x == 256)) bulk_wait_all();  // the last reductions are done"),
]


def _stages_3(text: str) -> str:
    text = apply_edits(text, STAGES_3, "bulk_dq_s3")
    body = text.index("template <int HD>\nstruct Stages")  # every later use is inside an HD template
    return text[:body] + re.sub(r"\bSTAGES\b", "Stages<HD>::N", text[body:])


def bulk_dq(text: str) -> str:
    return apply_edits(text, BULK_DQ, "bulk_dq")


def bulk_dq_s3(text: str) -> str:
    return _stages_3(bulk_dq(text))
