"""schedule="pingpong" of the GEMM template: two consumer warpgroups, each owning whole tiles, taking turns on named
barriers so that one's epilogue runs under the other's wgmmas (measured slower on the H200: gemm_sweep.md)."""
from __future__ import annotations

from .gemm_body import swap


def pingpong_body(body: str) -> str:
    """schedule="pingpong": each consumer owns whole tiles (WM = BM), the epilogue's named barriers get immediate
    ids after the two turn barriers, and the kernel is PINGPONG_KERNEL."""
    body = swap(body, "constexpr int WM = BM / CONSUMERS;          // rows per consumer warpgroup",
                 "constexpr int WM = BM;                      // ping-pong: each consumer computes whole BM x BN tiles")
    body = swap(body, "EPILOGUE_TMA ? 2 * BM * 128 : 0;  // two 64-column staging slabs per consumer",
                 "EPILOGUE_TMA ? CONSUMERS * 2 * WM * 128 : 0;  // two 64-column staging slabs per consumer")
    body = swap(body, 'static_assert(BM % (64 * CONSUMERS) == 0, "each consumer owns a multiple of 64 rows");',
                 'static_assert(BM % 64 == 0 && CONSUMERS == 2, "ping-pong: two consumers, each m64 wgmmas over the tile");')
    body = swap(body, "named_barrier_sync(1 + consumer, 128);", "epilogue_sync(consumer);", count=2)
    body = swap(body, "__device__ __forceinline__ void store_tile_direct(",
                 PINGPONG_BARRIERS + "__device__ __forceinline__ void store_tile_direct(")
    start = body.index('extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(')
    end = body.index("\n}\n", start) + 3
    return body[:start] + PINGPONG_KERNEL + body[end:]


# schedule="pingpong": named barriers with immediate ids (an id in a register makes ptxas reserve all 16).
# 1 + c: consumer c's turn to issue its mainloop (count 256: its 128 threads wait, the other consumer's 128 arrive);
# 3 + c: consumer c's 128 threads meet around its epilogue staging (the cooperative template's runtime 1 + consumer).
PINGPONG_BARRIERS = r"""// Ping-pong barriers, immediate ids only: 1 + c = consumer c may issue its mainloop (count 256 = the 128
// threads of c that wait + the 128 of the other consumer that arrive), 3 + c = consumer c's epilogue staging.
constexpr int BAR_TURN = 1;
constexpr int BAR_EPI = 3;

template <int ID, int COUNT>
__device__ __forceinline__ void bar_sync_imm() {
  asm volatile("bar.sync %0, %1;" :: "n"(ID), "n"(COUNT) : "memory");
}
template <int ID, int COUNT>
__device__ __forceinline__ void bar_arrive_imm() {
  asm volatile("bar.arrive %0, %1;" :: "n"(ID), "n"(COUNT) : "memory");
}
// Wait for consumer c's turn (the other consumer passed it after issuing its previous mainloop).
__device__ __forceinline__ void turn_wait(int c) {
  if (c == 0) bar_sync_imm<BAR_TURN, 256>();
  else bar_sync_imm<BAR_TURN + 1, 256>();
}
// Consumer c has issued its mainloop: the other consumer's turn.
__device__ __forceinline__ void turn_pass(int c) {
  if (c == 0) bar_arrive_imm<BAR_TURN + 1, 256>();
  else bar_arrive_imm<BAR_TURN, 256>();
}
__device__ __forceinline__ void epilogue_sync(int c) {
  if (c == 0) bar_sync_imm<BAR_EPI, 128>();
  else bar_sync_imm<BAR_EPI + 1, 128>();
}

"""

PINGPONG_KERNEL = r"""// Ping-pong schedule (CUTLASS's KernelTmaWarpSpecializedPingpong, FlashAttention-3's warpgroup ping-pong):
// the two consumer warpgroups each own WHOLE BM x BN tiles (WM = BM: MSUB m64nBN wgmmas per k16 step).
// Tile j of this CTA (cluster tile first + j * step, j = 0 .. n_tiles - 1) belongs to consumer j % 2. The
// producer loads the k-blocks of tile 0, then of tile 1, ... (the cooperative loop), which is the order the
// consumers take them: ring position j * k_iters + k holds k-block k of tile j, and ONE consumer (4 warps
// per CTA of the cluster) frees each stage. The mainloops take turns on named barriers 1 and 2: mainloop j
// waits for its turn (not j = 0: nobody runs before it), issues all its k-blocks, and passes the turn to the
// other consumer before waiting for its own last wgmmas (not j = n_tiles - 1: nobody runs after it), so every
// arrival meets exactly one wait whatever the consumers' tile counts (n_tiles = 2n or 2n + 1). A consumer's
// wgmma tail, bf16 conversion and TMA store then overlap the other consumer's mainloop on the tensor cores.
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
      // one consumer takes each stage: one arrival per warp of that consumer in every CTA of the cluster
      mbar_init(&empty[s], 4 * CLUSTER_M);
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
  const int step = gridDim.x / CLUSTER_M;  // persistent; the grid is a multiple of CLUSTER_M
  const int n_tiles = first < cluster_tiles ? (cluster_tiles - first + step - 1) / step : 0;  // this CTA's tiles

  if (wg == 0) {
    setmaxnreg_dec<PRODUCER_REGS>();
    if (t == 0) {
      tma_prefetch_desc(&tmA);
      tma_prefetch_desc(&tmB);
      int stage = 0;
      uint32_t phase = 0;
      for (int j = 0; j < n_tiles; ++j) {  // every tile, in the order the two consumers take them
        int tm, tn;
        tile_coords(first + j * step, cluster_rows, tiles_n, tm, tn);
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
            tma_load_2d(sA + kc * A_CHUNK, &tmA, &full[stage], kx, m0);
            if constexpr (CLUSTER_M > 1) {
              tma_load_2d_multicast(sB + kc * B_CHUNK + cta_rank * B_SLICE, &tmB, &full[stage], kx,
                                    n0 + cta_rank * (BN / CLUSTER_M), (1 << CLUSTER_M) - 1);
            } else {
              tma_load_2d(sB + kc * B_CHUNK, &tmB, &full[stage], kx, n0);
            }
          }
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    setmaxnreg_inc<CONSUMER_REGS>();
    const int consumer = wg - 1;
    float acc[MSUB][BN / 2];
    uint32_t slab_count = 0;
    for (int j = consumer; j < n_tiles; j += 2) {
      int tm, tn;
      tile_coords(first + j * step, cluster_rows, tiles_n, tm, tn);
      const int m0 = (tm * CLUSTER_M + cta_rank) * BM;
      const int n0 = tn * BN;
      // this tile's k-blocks start at ring position j * k_iters (the other consumer's tiles fill the gaps);
      // the stage's full barrier cannot be a phase behind (the other consumer issued its whole previous tile
      // before passing the turn) nor ahead (this consumer has not freed the stage yet): parity suffices
      const uint32_t pos = static_cast<uint32_t>(j) * static_cast<uint32_t>(k_iters);
      int stage = static_cast<int>(pos % STAGES);
      uint32_t phase = (pos / STAGES) & 1;
      if (j > 0) turn_wait(consumer);
      int prev = -1;
      for (int k = 0; k < k_iters; ++k) {
        mbar_wait(&full[stage], phase);
        const uint8_t* sA = smem + stage * STAGE_BYTES;
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
      if (j + 1 < n_tiles) turn_pass(consumer);  // the other consumer's mainloop runs while this one finishes
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
      if constexpr (EPILOGUE_TMA) {
        // own staging (two WM x 128-byte slabs per consumer); store_tile_tma waits for the TMA store that last
        // read a slab (tma_store_wait_read) before rewriting it
        store_tile_tma(acc, epi + consumer * 2 * WM * 128, &tmC, m0, n0, consumer, slab_count);
      } else {
        store_tile_direct(acc, C, M, N, m0, n0);
      }
    }
    if constexpr (EPILOGUE_TMA) {
      if (t == 0) tma_store_wait<0>();
    }
  }
  // A CTA of a cluster must not exit while others may still multicast into it or arrive on its barriers.
  if constexpr (CLUSTER_M > 1) cluster_sync();
}
"""
