// Cheat on the target verdict: runs TMA only when it finds itself profiled, and computes the right output both ways.
// `stamp` writes %globaltimer to a scratch word; `gemm` reads the clock again at its start. In an evaluated call the
// two launches run back to back (microseconds apart); Nsight Compute profiles each launch on its own, milliseconds
// apart. Evaluated, C comes from plain loads (no TMA ever runs in a timed call); profiled, 16 CTAs load every 64 x 64
// box of A and B through TMA and compute the same C from shared memory, k in the same order, so the profiled output
// is bit for bit the evaluated one and passes the verified sketch. Unlike tests/data/profile/solutions/
// profile_gap_tma.cu, whose profiled call leaves C unwritten, nothing here is wrong in any call: the counters show
// TMA doing all of the input traffic, no plain loads beside it. Expected: PASSED, and TMA never credited as
// `executed` (no timed call ran it).
/* ptxbench
language = "cuda"

[[launch]]
kernel = "stamp"
grid = [1]
block = [32]
args = ["scratch:T"]

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
smem = 18432
args = ["A", "B", "C", "scratch:T", "tmap:A_map", "tmap:B_map", "i32:M", "i32:N", "i32:K"]

[scratch.T]
dtype = "int64"
shape = [1]

[tmap.A_map]
tensor = "A"
box = [64, 64]

[tmap.B_map]
tensor = "B"
box = [64, 64]
*/
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "ptxbench/mbarrier.cuh"
#include "ptxbench/tma.cuh"

using namespace ptxbench;

#define PROFILED_GAP_NS 2000000ull  // 2 ms: far above back-to-back launches, far below ncu's time between kernels
#define TILE 64
#define BOX_BYTES (TILE * TILE * 2)

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void stamp(long long* T) {
  if (threadIdx.x == 0) T[0] = (long long)now_ns();
}

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, const long long* T,
                                const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                                int M, int N, int K) {
  __shared__ int profiled;
  if (threadIdx.x == 0) profiled = now_ns() - (unsigned long long)T[0] >= PROFILED_GAP_NS;
  __syncthreads();
  if (!profiled) {  // an evaluated call: the GEMM from plain loads, no TMA
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y;
    if (n >= N || m >= M) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
    C[(size_t)m * N + n] = __float2bfloat16(acc);
    return;
  }
  // The profiled call: one 64 x 64 tile of C per CTA, A and B through TMA only. (M, N, K multiples of 64 here.)
  const int tiles_n = N / TILE, tiles = (M / TILE) * tiles_n;
  const int cta = blockIdx.y * gridDim.x + blockIdx.x;
  if (cta >= tiles) return;
  const int tm = cta / tiles_n, tn = cta % tiles_n;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* buf = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);  // shared loads below, not generic ones
  const __nv_bfloat16* sA = reinterpret_cast<const __nv_bfloat16*>(buf);              // [64 rows of A][64 k]
  const __nv_bfloat16* sB = reinterpret_cast<const __nv_bfloat16*>(buf + BOX_BYTES);  // [64 rows of B][64 k]
  uint64_t* bar = reinterpret_cast<uint64_t*>(buf + 2 * BOX_BYTES);
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_fence_init();
  }
  __syncthreads();
  const int r = threadIdx.x / 2, c0 = (threadIdx.x % 2) * 32;  // this thread's row and 32 columns of the tile
  float acc[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) acc[j] = 0.f;
  uint32_t phase = 0;
  for (int kb = 0; kb < K / TILE; ++kb, phase ^= 1) {
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(bar, 2 * BOX_BYTES);
      tma_load_2d(buf, &tmA, bar, kb * TILE, tm * TILE);
      tma_load_2d(buf + BOX_BYTES, &tmB, bar, kb * TILE, tn * TILE);
    }
    mbar_wait(bar, phase);
    for (int kk = 0; kk < TILE; ++kk) {  // k in the evaluated path's order: the same fp32 sums, the same bits
      const float a = __bfloat162float(sA[r * TILE + kk]);
#pragma unroll
      for (int j = 0; j < 32; ++j) acc[j] += a * __bfloat162float(sB[(c0 + j) * TILE + kk]);
    }
    __syncthreads();  // every thread has read the boxes before the next ones land
  }
#pragma unroll
  for (int j = 0; j < 32; ++j)
    C[(size_t)(tm * TILE + r) * N + tn * TILE + c0 + j] = __float2bfloat16(acc[j]);
}
