"""feed > 0 of the GEMM template: L2 feeder CTAs on the SMs the persistent grid leaves idle.

The main GEMM runs 128 CTAs on 132 SMs (1,792 tiles = 14 rounds either way; 132 CTAs cost 1.2%), and its loads
that miss L2 cost it 2-3% (gemm_sweep.md, tma_hot). A feeder CTA on an idle SM prefetches into L2 the A and B
k-blocks the tiles in flight will load `feed` k-steps ahead of the producers, so their loads find the lines in L2.
Its own TMA unit (or load/store unit) does the prefetching: round 8 measured that prefetches issued by the producer
itself stall the loads queued behind them.

How a feeder knows where the producers are: every FEED_EVERY-th CTA's producer adds 1 to a counter for each k-step
it issues; the feeder reads the counter when it starts and divides what was added since by the reporters' number.
The counter is a scratch word the harness does not zero (poisoned between calls): only differences are read, so its
starting value does not matter, and no timed memset is needed. A feeder stops when every report has arrived, or
after 20 us without one (a feeder that started after the producers finished). The feeders only prefetch: what they
do or fail to do never changes C.
"""
from __future__ import annotations

from .gemm_body import swap

FEED_CTAS = 4  # the SMs a 128-CTA grid leaves idle on a 132-SM H100 / H200

FEED_HELPERS = r"""// ---- L2 feeders (feed > 0) ----
// FEED_CTAS extra CTAs prefetch into L2 the A and B k-blocks of the tiles in flight, FEED_LEAD k-steps ahead of
// the producers. Every FEED_EVERY-th CTA's producer adds 1 to *feed_count per k-step it issues.
constexpr int FEED_EVERY = 8;

__device__ __forceinline__ void feed_report(unsigned* count) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" :: "l"(count) : "memory");
}
__device__ __forceinline__ unsigned feed_read(const unsigned* count) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long feed_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void feed_box(const CUtensorMap* tmap, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               :: "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void feed_line(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" :: "l"(p) : "memory");
}

// k-step s of the round's tiles this feeder covers: each box (A's tile-row strip, B's tile-column strip) once per
// round, by the round's first tile that uses it in the grouped order (tile rows fastest within a group).
__device__ __forceinline__ void feed_step(int s, const CUtensorMap* tmA, const CUtensorMap* tmB,
                                          const __nv_bfloat16* A, const __nv_bfloat16* B, int feeder, int ctas,
                                          int tiles_m, int tiles_n, int k_iters, int M, int N, int K) {
  const int round = s / k_iters;
  const int kb = s - round * k_iters;
  const int start = round * ctas;
  const int tiles = tiles_m * tiles_n;
  const int group_size = GROUP_M * tiles_n;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  // FEED_BOXES: lane l of the one warp takes tiles feeder * 32 + l (+ 32 FEED_CTAS ...) and prefetches whole boxes;
  // else the four warps take tiles feeder, feeder + FEED_CTAS, ... together, one 128-byte line of a box per row.
  for (int c = FEED_BOXES ? feeder * 32 + lane : feeder; c < ctas; c += FEED_BOXES ? 32 * FEED_CTAS : FEED_CTAS) {
    const int tile = start + c;
    if (tile >= tiles) break;
    int tm, tn;
    tile_coords(tile, tiles_m, tiles_n, tm, tn);
    const int rows = min(tiles_m - (tile / group_size) * GROUP_M, GROUP_M);
    const int in_group = tile % group_size;
    const bool own_a = in_group < rows || tile - rows < start;  // no earlier tile of the round on this strip
    const bool own_b = in_group % rows == 0 || tile == start;
#pragma unroll
    for (int kc = 0; kc < KCH; ++kc) {
      const int kx = kb * BK + kc * 64;
      if constexpr (FEED_BOXES) {
        if (own_a) feed_box(tmA, kx, tm * BM);
        if (own_b) feed_box(tmB, kx, tn * BN);
      } else if (kx < K) {
        for (int r = warp * 32 + lane; own_a && r < BM && tm * BM + r < M; r += 128)
          feed_line(A + static_cast<size_t>(tm * BM + r) * K + kx);
        for (int r = warp * 32 + lane; own_b && r < BN && tn * BN + r < N; r += 128)
          feed_line(B + static_cast<size_t>(tn * BN + r) * K + kx);
      }
    }
  }
}

// One feeder CTA (index `feeder` of FEED_CTAS): FEED_BOXES uses warp 0, lines warps 0-3; the other warps exit.
__device__ void feed_l2(const CUtensorMap* tmA, const CUtensorMap* tmB, const __nv_bfloat16* A,
                        const __nv_bfloat16* B, const unsigned* count, int feeder, int ctas, int M, int N, int K) {
  const unsigned base = feed_read(count);  // reports are counted from here (the word is not zeroed between calls)
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, k_iters = (K + BK - 1) / BK;
  const int tiles = tiles_m * tiles_n;
  const int reporters = (ctas + FEED_EVERY - 1) / FEED_EVERY;
  unsigned reports = 0;  // every report of this launch: the reporters' k-steps
  for (int c = 0; c < ctas; c += FEED_EVERY) reports += (c < tiles ? (tiles - c + ctas - 1) / ctas : 0) * k_iters;
  const int total = (tiles + ctas - 1) / ctas * k_iters;  // k-steps of the busiest CTA
  int next = 0;
  unsigned last = base;
  unsigned long long heard = feed_ns();
  while (next < total) {
    const unsigned got = feed_read(count) - base;
    if (got >= reports) break;  // the producers have issued every load
    if (got != last - base) {
      last = base + got;
      heard = feed_ns();
    } else if (feed_ns() - heard > 20000) {
      break;  // 20 us without a report: the producers are done (this feeder started late) or not reporting
    }
    const int done = static_cast<int>(got / reporters);  // k-steps the reporters have issued, on average
    if (next < done) next = done;                         // loaded already
    const int until = min(total, done + FEED_LEAD);
    if (next >= until) {
      __nanosleep(128);
      continue;
    }
    for (; next < until; ++next) feed_step(next, tmA, tmB, A, B, feeder, ctas, tiles_m, tiles_n, k_iters, M, N, K);
  }
}

"""


def feed_body(body: str, lead: int, boxes: bool) -> str:
    """feed=lead: FEED_CTAS feeder CTAs after the tile CTAs (the grid's last ones), the producers of every
    FEED_EVERY-th CTA reporting their k-steps. boxes: TMA box prefetches by one warp, else line prefetches by four."""
    consts = f"constexpr int FEED_CTAS = {FEED_CTAS};\nconstexpr int FEED_LEAD = {lead};\n" \
             f"constexpr bool FEED_BOXES = {str(boxes).lower()};\n"
    body = swap(body, 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(',
                consts + FEED_HELPERS + 'extern "C" __global__ void __launch_bounds__(NTHREADS, 1)\ngemm_bf16_tn(')
    body = swap(body, "const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K) {",
                "const __grid_constant__ CUtensorMap tmC, __nv_bfloat16* C, int M, int N, int K,\n"
                "             const __nv_bfloat16* A, const __nv_bfloat16* B, unsigned* feed_count) {")
    body = swap(body, "  const int wg = threadIdx.x / 128;\n",
                "  if (blockIdx.x >= gridDim.x - FEED_CTAS) {  // feed: an L2 feeder, not a tile CTA\n"
                "    if (threadIdx.x < (FEED_BOXES ? 32 : 128))\n"
                "      feed_l2(&tmA, &tmB, A, B, feed_count, blockIdx.x - (gridDim.x - FEED_CTAS), "
                "gridDim.x - FEED_CTAS, M, N, K);\n"
                "    return;\n"
                "  }\n"
                "  const int wg = threadIdx.x / 128;\n")
    body = swap(body, "  const int step = PERSISTENT ? gridDim.x / CLUSTER_M : cluster_tiles;",
                "  const int step = PERSISTENT ? gridDim.x - FEED_CTAS : cluster_tiles;  // feed: the tile CTAs (always persistent)")
    body = swap(body, "          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n        }\n      }\n    }\n  } else {",
                "          if (blockIdx.x % FEED_EVERY == 0) feed_report(feed_count);  // feed: this k-step is issued\n"
                "          if (++stage == STAGES) { stage = 0; phase ^= 1; }\n        }\n      }\n    }\n  } else {")
    return body
