/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm_bf16_tn"
grid = ["min(min(num_sms, 128), cdiv(M, 128) * cdiv(N, 256))", 1, 1]
block = [384, 1, 1]
smem = 230464
args = ["tmap:A_map", "tmap:B_map", "tmap:C_map", "C", "i32:M", "i32:N", "i32:K"]

[tmap.A_map]
tensor = "A"
box = [64, 128]
swizzle = "128B"
l2_promotion = "256B"

[tmap.B_map]
tensor = "B"
box = [64, 256]
swizzle = "128B"
l2_promotion = "256B"

[tmap.C_map]
tensor = "C"
box = [64, 64]
swizzle = "128B"
*/
// Reference GEMM rendered by workloads/solutions/gemm_template.py with {'bm': 128, 'bn': 256, 'bk': 64, 'stages': 4, 'consumers': 2, 'persistent': True, 'group_m': 16, 'cluster_m': 1, 'epilogue': 'tma', 'producer_regs': 40, 'max_ctas': 128, 'defer': True, 'l2_hints': True}
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "ptxbench/wgmma.cuh"
#include "ptxbench/tma.cuh"
#include "ptxbench/mbarrier.cuh"

using namespace ptxbench;

constexpr int BM = 128;
constexpr int BN = 256;
constexpr int BK = 64;
constexpr int STAGES = 4;
constexpr int CONSUMERS = 2;
constexpr bool PERSISTENT = true;
constexpr int GROUP_M = 16;
constexpr int CLUSTER_M = 1;
constexpr bool EPILOGUE_TMA = true;
constexpr int PRODUCER_REGS = 40;
constexpr int CONSUMER_REGS = 232;

// C[M,N] = A[M,K] @ B[N,K]^T, bf16 in, fp32 accumulate, bf16 out; both operands K-major.
// One producer warpgroup (one thread issues TMA loads into a STAGES-deep ring of shared-memory
// stages guarded by full/empty mbarriers) and CONSUMERS warpgroups that each own WM = BM/CONSUMERS
// rows of the BM x BN tile and run wgmma m64nBNk16 on 128B-swizzled operands. Optionally
// persistent (one CTA per SM walking the tiles in grouped order) and clustered (CLUSTER_M CTAs on
// neighbouring M tiles share each B tile through TMA multicast). M, N and K may be ragged: TMA
// zero-fills out-of-bounds loads and the epilogue guards its stores.

// ---- L2 eviction priorities (l2_hints) ----
template <bool LAST>
__device__ __forceinline__ uint64_t l2_policy() {  // evict_last (LAST) or evict_first, for every access it marks
  uint64_t p;
  if constexpr (LAST) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ void tma_load_2d_hint(void* smem_dst, const void* tmap, uint64_t* bar, int32_t c0,
                                                 int32_t c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      :: "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))), "l"(reinterpret_cast<uint64_t>(tmap)),
         "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_store_2d_hint(const void* tmap, const void* smem_src, int32_t c0, int32_t c1,
                                                  uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;"
      :: "l"(reinterpret_cast<uint64_t>(tmap)), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_src))),
         "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

constexpr int NTHREADS = 128 * (CONSUMERS + 1);
constexpr int WM = BM / CONSUMERS;          // rows per consumer warpgroup
constexpr int MSUB = WM / 64;               // m64 wgmma rows per consumer
constexpr int KCH = BK / 64;                // 64-element (128-byte) swizzle chunks per stage
constexpr int A_CHUNK = BM * 64 * 2;        // bytes of one A chunk (BM rows x 128 B)
constexpr int B_CHUNK = BN * 64 * 2;
constexpr int B_SLICE = B_CHUNK / CLUSTER_M;  // part of B each CTA of a cluster loads and multicasts
constexpr int A_STAGE = A_CHUNK * KCH;
constexpr int STAGE_BYTES = A_STAGE + B_CHUNK * KCH;
constexpr int EPI_BYTES = EPILOGUE_TMA ? 2 * BM * 128 : 0;  // two 64-column staging slabs per consumer

static_assert(BM % (64 * CONSUMERS) == 0, "each consumer owns a multiple of 64 rows");
static_assert(BN % 16 == 0 && BN <= 256, "wgmma N");
static_assert((BN / CLUSTER_M) % 8 == 0, "multicast slices must keep the 1024-byte swizzle atom");

__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm, int& tn) {
  // Grouped order: GROUP_M tile rows are walked column by column, so the CTAs running at one
  // time share A rows and B columns in L2.
  const int group_size = GROUP_M * tiles_n;
  const int first_m = (tile / group_size) * GROUP_M;
  const int rows = min(tiles_m - first_m, GROUP_M);
  const int in_group = tile % group_size;
  tm = first_m + in_group % rows;
  tn = in_group / rows;
}

__device__ __forceinline__ void store_tile_direct(float (&acc)[MSUB][BN / 2], __nv_bfloat16* C, int M, int N,
                                                  int row0, int col0) {
  const int t = threadIdx.x % 128;
  const int r_base = row0 + 16 * (t / 32) + (t % 32) / 4;
  const int c_base = col0 + 2 * (t % 4);
  const bool n_even = (N % 2) == 0;
#pragma unroll
  for (int ms = 0; ms < MSUB; ++ms) {
#pragma unroll
    for (int j = 0; j < BN / 2; j += 2) {
      const int r = r_base + ms * 64 + 8 * ((j / 2) % 2);
      const int c = c_base + 8 * (j / 4);
      if (r < M) {
        __nv_bfloat16* p = C + static_cast<size_t>(r) * N + c;
        if (n_even && c + 1 < N) {
          *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(acc[ms][j], acc[ms][j + 1]);
        } else {
          if (c < N) p[0] = __float2bfloat16_rn(acc[ms][j]);
          if (c + 1 < N) p[1] = __float2bfloat16_rn(acc[ms][j + 1]);
        }
      }
    }
  }
}

// TMA-store epilogue, one 64-column slab at a time through two WM x 128-byte staging buffers per
// consumer: slab s is written (128B swizzle: 16-byte chunk index XOR row % 8, which also makes
// these shared stores bank-conflict free) while the store of slab s-1 is still reading the other
// buffer; the last stores of a tile overlap the next tile's main loop. `slab_count` runs across
// tiles so the buffers alternate.
__device__ __forceinline__ void store_tile_tma(float (&acc)[MSUB][BN / 2], uint8_t* stage_buf, const CUtensorMap* tmC,
                                               int row0, int col0, int consumer, uint32_t& slab_count) {
  const int t = threadIdx.x % 128;
  constexpr int SLABS = BN / 64;
  constexpr int SLAB_BYTES = WM * 128;
  const uint32_t base = smem_u32(stage_buf) + (16 * (t / 32) + (t % 32) / 4) * 128 + (t % 4) * 4;
  const uint32_t rr = (t / 4) % 8;  // row % 8 of every element this thread holds
#pragma unroll
  for (int s = 0; s < SLABS; ++s, ++slab_count) {
    const uint32_t buf = (slab_count & 1) * SLAB_BYTES;
    if (t == 0) tma_store_wait_read<1>();  // the store that last read this buffer is done with it
    named_barrier_sync(1 + consumer, 128);
#pragma unroll
    for (int ms = 0; ms < MSUB; ++ms) {
#pragma unroll
      for (int q = 8 * s; q < 8 * s + 8; ++q) {  // 8-column group q: acc[4q..4q+3]
        const uint32_t addr = base + buf + ms * 64 * 128 + (((q % 8) ^ rr) << 4);
        __nv_bfloat162 lo = __floats2bfloat162_rn(acc[ms][4 * q], acc[ms][4 * q + 1]);
        __nv_bfloat162 hi = __floats2bfloat162_rn(acc[ms][4 * q + 2], acc[ms][4 * q + 3]);
        asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(*reinterpret_cast<uint32_t*>(&lo)) : "memory");
        asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr + 8 * 128), "r"(*reinterpret_cast<uint32_t*>(&hi)) : "memory");
      }
    }
    fence_proxy_async();
    named_barrier_sync(1 + consumer, 128);
    if (t == 0) {
      tma_store_2d_hint(tmC, stage_buf + buf, col0 + 64 * s, row0, l2_policy<false>());
      tma_store_commit();
    }
  }
}

// defer: slab S (columns 64 S..) of this consumer's packed tile through staging buffer slab_count % 2, then its TMA
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
    tma_store_2d_hint(tmC, stage_buf + buf, col0 + 64 * S, row0, l2_policy<false>());
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

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
gemm_bf16_tn(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
             const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Dynamic shared memory is only 16-byte aligned; swizzled tiles need 1024.
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* epi = smem + STAGES * STAGE_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(epi + EPI_BYTES);
  uint64_t* empty = full + STAGES;

  const int wg = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  const uint32_t cta_rank = CLUSTER_M > 1 ? cluster_ctarank() : 0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      // one arrival per consumer warp of every CTA in the cluster (each frees its B slice for all)
      mbar_init(&empty[s], CONSUMERS * 4 * CLUSTER_M);
    }
    mbar_fence_init();
  }
  if constexpr (CLUSTER_M > 1) cluster_sync(); else __syncthreads();

  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int k_iters = (K + BK - 1) / BK;
  // CTAs of one cluster take the CLUSTER_M neighbouring M tiles of one "cluster tile"; a cluster
  // row that overhangs M gets zero-filled loads and skipped stores.
  const int cluster_rows = (tiles_m + CLUSTER_M - 1) / CLUSTER_M;
  const int cluster_tiles = cluster_rows * tiles_n;
  const int first = blockIdx.x / CLUSTER_M;
  const int step = PERSISTENT ? gridDim.x / CLUSTER_M : cluster_tiles;  // grid: a multiple of CLUSTER_M

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (t == 0) {
      tma_prefetch_desc(&tmA);
      tma_prefetch_desc(&tmB);
      const uint64_t keep = l2_policy<true>(), stream = l2_policy<false>();  // l2_hints: A kept, B streamed
      int stage = 0;
      uint32_t phase = 0;
      for (int ct = first; ct < cluster_tiles; ct += step) {
        int tm, tn;
        tile_coords(ct, cluster_rows, tiles_n, tm, tn);
        const int m0 = (tm * CLUSTER_M + cta_rank) * BM;
        const int n0 = tn * BN;
        for (int k = 0; k < k_iters; ++k) {
          mbar_wait(&empty[stage], phase ^ 1);
          uint8_t* sA = smem + stage * STAGE_BYTES;
          uint8_t* sB = sA + A_STAGE;
          mbar_arrive_expect_tx(&full[stage], STAGE_BYTES);
#pragma unroll
          for (int kc = 0; kc < KCH; ++kc) {
            const int kx = k * BK + kc * 64;
            tma_load_2d_hint(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0, keep);
            if constexpr (CLUSTER_M > 1) {
              tma_load_2d_multicast(sB + kc * B_CHUNK + cta_rank * B_SLICE, &tmB, &full[stage], kx,
                                    n0 + cta_rank * (BN / CLUSTER_M), (1 << CLUSTER_M) - 1);
            } else {
              tma_load_2d_hint(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0, stream);
            }
          }
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int consumer = __shfl_sync(0xffffffffu, wg - 1, 0);  // warp-uniform to ptxas: descriptors in uniform registers
    float acc[MSUB][BN / 2];
    uint32_t pk[MSUB][BN / 4];  // defer: the previous tile's result, bf16 pairs
    int pm0 = -1, pn0 = 0;      // its first row (this consumer's) and column; pm0 < 0: none yet
    uint32_t slab_count = 0;
    int stage = 0;
    uint32_t phase = 0;
    for (int ct = first; ct < cluster_tiles; ct += step) {
      int tm, tn;
      tile_coords(ct, cluster_rows, tiles_n, tm, tn);
      const int m0 = (tm * CLUSTER_M + cta_rank) * BM;
      const int n0 = tn * BN;
      int prev = -1;
      for (int k = 0; k < k_iters; ++k) {
        mbar_wait(&full[stage], phase);
        const uint8_t* sA = smem + stage * STAGE_BYTES + consumer * WM * 128;
        const uint8_t* sB = smem + stage * STAGE_BYTES + A_STAGE;
        wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < KCH; ++kc) {
          const uint64_t db = make_desc_sw128(sB + kc * B_CHUNK);
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int ms = 0; ms < MSUB; ++ms) {
              const uint64_t da = make_desc_sw128(sA + kc * A_CHUNK + ms * 64 * 128);
              wgmma_m64k16_bf16<BN>(acc[ms], da + 2 * kk, db + 2 * kk, (k | kc | kk) != 0);
            }
          }
        }
        wgmma_commit();
        if (pm0 >= 0 && k < BN / 64)  // defer: the previous tile's slab k, under this k-block's wgmmas
          store_slab_deferred(pk, k, epi + consumer * 2 * WM * 128, &tmC, pm0, pn0, consumer, slab_count);
        if (prev >= 0) {
          wgmma_wait<1>();  // the group that read stage `prev` is done: hand it back
          if (t % 32 == 0) {
            if constexpr (CLUSTER_M > 1) {
              for (int r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(&empty[prev], r);
            } else {
              mbar_arrive(&empty[prev]);
            }
          }
        }
        prev = stage;
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int ms = 0; ms < MSUB; ++ms) wgmma_fence_regs(acc[ms]);
      if (prev >= 0 && t % 32 == 0) {
        if constexpr (CLUSTER_M > 1) {
          for (int r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(&empty[prev], r);
        } else {
          mbar_arrive(&empty[prev]);
        }
      }
      // defer: slabs of the previous tile its k-blocks did not reach (K shorter than BN / 64 k-blocks)
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
    if (t == 0) tma_store_wait<0>();
  }
  // A CTA of a cluster must not exit while others may still multicast into it or arrive on its barriers.
  if constexpr (CLUSTER_M > 1) cluster_sync();
}
