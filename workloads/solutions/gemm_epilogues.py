"""The GEMM template's epilogue options: stmatrix=True (the TMA epilogue's staging written by stmatrix.x4) and
defer=True (a tile's bf16 result kept in registers and stored under the next tile's first k-blocks); with both, the
deferred slabs are written by stmatrix.x4."""
from __future__ import annotations

from .gemm_body import swap


# stmatrix=True: the TMA epilogue's staging written by stmatrix.x4. The 16 x 16 block of a warp at 8-column
# groups (q0, q0 + 1) is four 8 x 8 matrices; lanes 8i..8i+7 address the rows of matrix i = (rows + 8 * (i % 2),
# group q0 + i / 2), and register i holds this thread's pair of matrix i, which is exactly the wgmma
# accumulator's layout. The same 128B-swizzled slab as the st.shared path (chunk XOR row % 8): no bank conflicts.
STMATRIX_STORE_TILE = r"""__device__ __forceinline__ void store_tile_tma(float (&acc)[MSUB][BN / 2], uint8_t* stage_buf, const CUtensorMap* tmC,
                                               int row0, int col0, int consumer, uint32_t& slab_count) {
  const int t = threadIdx.x % 128;
  const int lane = t % 32;
  const int mi = lane / 8;  // the matrix whose row this lane addresses
  constexpr int SLABS = BN / 64;
  constexpr int SLAB_BYTES = WM * 128;
  const uint32_t row = 16 * (t / 32) + 8 * (mi % 2) + lane % 8;
  const uint32_t base = smem_u32(stage_buf) + row * 128;
  const uint32_t rr = row % 8;
#pragma unroll
  for (int s = 0; s < SLABS; ++s, ++slab_count) {
    const uint32_t buf = (slab_count & 1) * SLAB_BYTES;
    if (t == 0) tma_store_wait_read<1>();  // the store that last read this buffer is done with it
    named_barrier_sync(1 + consumer, 128);
#pragma unroll
    for (int ms = 0; ms < MSUB; ++ms) {
#pragma unroll
      for (int pr = 0; pr < 4; ++pr) {  // 8-column groups q0 = 8s + 2pr and q0 + 1
        const int q0 = 8 * s + 2 * pr;
        const uint32_t addr = base + buf + ms * 64 * 128 + (((2 * pr + mi / 2) ^ rr) << 4);
        __nv_bfloat162 m0 = __floats2bfloat162_rn(acc[ms][4 * q0], acc[ms][4 * q0 + 1]);
        __nv_bfloat162 m1 = __floats2bfloat162_rn(acc[ms][4 * q0 + 2], acc[ms][4 * q0 + 3]);
        __nv_bfloat162 m2 = __floats2bfloat162_rn(acc[ms][4 * q0 + 4], acc[ms][4 * q0 + 5]);
        __nv_bfloat162 m3 = __floats2bfloat162_rn(acc[ms][4 * q0 + 6], acc[ms][4 * q0 + 7]);
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                     :: "r"(addr), "r"(*reinterpret_cast<uint32_t*>(&m0)), "r"(*reinterpret_cast<uint32_t*>(&m1)),
                        "r"(*reinterpret_cast<uint32_t*>(&m2)), "r"(*reinterpret_cast<uint32_t*>(&m3)) : "memory");
      }
    }
    fence_proxy_async();
    named_barrier_sync(1 + consumer, 128);
    if (t == 0) {
      tma_store_2d(tmC, stage_buf + buf, col0 + 64 * s, row0);
      tma_store_commit();
    }
  }
}
"""


# defer=True: the tile's result packed to bf16 pairs (pk[ms][2q] row r, pk[ms][2q + 1] row r + 8, columns 8q + 2 (t % 4)
# + 0 / 1: store_tile_tma's element order) right after the main loop, and its slabs stored under the next tile's
# wgmmas, slab s after k-block s's wgmmas are issued. The slab index picks registers, so it is a template argument
# (a runtime index would put pk in local memory).
DEFER_SLAB = r"""// defer: slab S (columns 64 S..) of this consumer's packed tile through staging buffer slab_count % 2, then its TMA
// store; called with the tensor pipe busy with the next tile's wgmmas.
template <int S>
__device__ __forceinline__ void store_slab_packed(const uint32_t (&pk)[MSUB][BN / 4], uint8_t* stage_buf,
                                                  const CUtensorMap* tmC, int row0, int col0, int consumer,
                                                  uint32_t slab_count) {
  const int t = threadIdx.x % 128;
  constexpr int SLAB_BYTES = WM * 128;
  const uint32_t base = smem_u32(stage_buf) + (16 * (t / 32) + (t % 32) / 4) * 128 + (t % 4) * 4;
  const uint32_t rr = (t / 4) % 8;  // row % 8 of every element this thread holds
  const uint32_t buf = (slab_count & 1) * SLAB_BYTES;
  if (t == 0) tma_store_wait_read<1>();  // the store that last read this buffer is done with it
  named_barrier_sync(1 + consumer, 128);
#pragma unroll
  for (int ms = 0; ms < MSUB; ++ms) {
#pragma unroll
    for (int q = 8 * S; q < 8 * S + 8; ++q) {
      const uint32_t addr = base + buf + ms * 64 * 128 + (((q % 8) ^ rr) << 4);
      asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(pk[ms][2 * q]) : "memory");
      asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr + 8 * 128), "r"(pk[ms][2 * q + 1]) : "memory");
    }
  }
  fence_proxy_async();
  named_barrier_sync(1 + consumer, 128);
  if (t == 0) {
    tma_store_2d(tmC, stage_buf + buf, col0 + 64 * S, row0);
    tma_store_commit();
  }
}

// Slab s (0 <= s < BN / 64, a runtime value) by a compile-time one.
__device__ __forceinline__ void store_slab_deferred(const uint32_t (&pk)[MSUB][BN / 4], int s, uint8_t* stage_buf,
                                                   const CUtensorMap* tmC, int row0, int col0, int consumer,
                                                   uint32_t& slab_count) {
  static_assert(BN / 64 <= 4, "defer: up to 4 slabs");
  switch (s) {
    case 0: store_slab_packed<0>(pk, stage_buf, tmC, row0, col0, consumer, slab_count); break;
    case 1: if constexpr (BN / 64 > 1) store_slab_packed<1>(pk, stage_buf, tmC, row0, col0, consumer, slab_count); break;
    case 2: if constexpr (BN / 64 > 2) store_slab_packed<2>(pk, stage_buf, tmC, row0, col0, consumer, slab_count); break;
    default: if constexpr (BN / 64 > 3) store_slab_packed<3>(pk, stage_buf, tmC, row0, col0, consumer, slab_count); break;
  }
  ++slab_count;
}

"""


# defer=True with stmatrix=True: a slab's staging by stmatrix.x4, as STMATRIX_STORE_TILE writes it. The packed pairs
# pk[ms][2q] (row r) and pk[ms][2q + 1] (row r + 8) of 8-column groups q0 = 2p and q0 + 1 are the four matrices of one
# stmatrix.x4, in its register order (rows +0 / +8, then the next group): 4 instructions a slab for 16 st.shared.
# Under defer the slabs are written inside the k-loop, beside the wgmmas' shared-memory reads.
DEFER_SLAB_STMATRIX = [(
    """  const uint32_t base = smem_u32(stage_buf) + (16 * (t / 32) + (t % 32) / 4) * 128 + (t % 4) * 4;
  const uint32_t rr = (t / 4) % 8;  // row % 8 of every element this thread holds
""", """  const int mi = (t % 32) / 8;  // defer + stmatrix: the matrix whose row this lane addresses
  const uint32_t row = 16 * (t / 32) + 8 * (mi % 2) + t % 8;
  const uint32_t base = smem_u32(stage_buf) + row * 128;
  const uint32_t rr = row % 8;
"""), ("""    for (int q = 8 * S; q < 8 * S + 8; ++q) {
      const uint32_t addr = base + buf + ms * 64 * 128 + (((q % 8) ^ rr) << 4);
      asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(pk[ms][2 * q]) : "memory");
      asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr + 8 * 128), "r"(pk[ms][2 * q + 1]) : "memory");
    }""", """    for (int q = 8 * S; q < 8 * S + 8; q += 2) {  // groups q, q + 1: one stmatrix.x4
      const uint32_t addr = base + buf + ms * 64 * 128 + ((((q % 8) + mi / 2) ^ rr) << 4);
      asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                   :: "r"(addr), "r"(pk[ms][2 * q]), "r"(pk[ms][2 * q + 1]), "r"(pk[ms][2 * q + 2]),
                      "r"(pk[ms][2 * q + 3]) : "memory");
    }""")]


def defer_body(body: str, stmatrix: bool = False) -> str:
    """defer=True (see DEFER_SLAB): the packed tile, its slabs stored in the next tile's first k-blocks; with
    stmatrix, each slab's staging by stmatrix.x4 (DEFER_SLAB_STMATRIX)."""
    slab = DEFER_SLAB
    for old, new in DEFER_SLAB_STMATRIX if stmatrix else []:
        slab = swap(slab, old, new)
    body = swap(body, 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(',
                 slab + 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(')
    body = swap(body, """    float acc[MSUB][BN / 2];
    uint32_t slab_count = 0;""", """    float acc[MSUB][BN / 2];
    uint32_t pk[MSUB][BN / 4];  // defer: the previous tile's result, bf16 pairs
    int pm0 = -1, pn0 = 0;      // its first row (this consumer's) and column; pm0 < 0: none yet
    uint32_t slab_count = 0;""")
    body = swap(body, """        wgmma_commit();
        if (prev >= 0) {
          wgmma_wait<1>();  // the group that read stage `prev` is done: hand it back""",
                 """        wgmma_commit();
        if (pm0 >= 0 && k < BN / 64)  // defer: the previous tile's slab k, under this k-block's wgmmas
          store_slab_deferred(pk, k, epi + consumer * 2 * WM * 128, &tmC, pm0, pn0, consumer, slab_count);
        if (prev >= 0) {
          wgmma_wait<1>();  // the group that read stage `prev` is done: hand it back""")
    body = swap(body, """      if constexpr (EPILOGUE_TMA) {
        store_tile_tma(acc, epi + consumer * 2 * WM * 128, &tmC, m0 + consumer * WM, n0, consumer, slab_count);
      } else {
        store_tile_direct(acc, C, M, N, m0 + consumer * WM, n0);
      }
    }
    if constexpr (EPILOGUE_TMA) {
      if (t == 0) tma_store_wait<0>();
    }""", """      // defer: slabs of the previous tile its k-blocks did not reach (K shorter than BN / 64 k-blocks)
      for (int s = k_iters; pm0 >= 0 && s < BN / 64; ++s)
        store_slab_deferred(pk, s, epi + consumer * 2 * WM * 128, &tmC, pm0, pn0, consumer, slab_count);
#pragma unroll
      for (int ms = 0; ms < MSUB; ++ms) {
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
          __nv_bfloat162 lo = __floats2bfloat162_rn(acc[ms][4 * q], acc[ms][4 * q + 1]);
          __nv_bfloat162 hi = __floats2bfloat162_rn(acc[ms][4 * q + 2], acc[ms][4 * q + 3]);
          pk[ms][2 * q] = *reinterpret_cast<uint32_t*>(&lo);
          pk[ms][2 * q + 1] = *reinterpret_cast<uint32_t*>(&hi);
        }
      }
      pm0 = m0 + consumer * WM;
      pn0 = n0;
    }
    for (int s = 0; pm0 >= 0 && s < BN / 64; ++s)  // the last tile's slabs
      store_slab_deferred(pk, s, epi + consumer * 2 * WM * 128, &tmC, pm0, pn0, consumer, slab_count);
    if (t == 0) tma_store_wait<0>();""")
    return body
