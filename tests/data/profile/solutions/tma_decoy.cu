// A TMA decoy: the smoke GEMM computed from plain loads (gemm: each thread reads a row of A and a row of B, so plain
// loads bring in M * N * K * 2 * 2 bytes, 256 times the inputs'), and TMA run beside it (tma_sweep: every 64 x 64 box
// of A and of B loaded once into a scratch buffer, exactly the inputs' bytes, work share 1.0): TMA moves enough bytes
// to pass the token share, none of which the output is computed from.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
smem = 0
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]

[[launch]]
kernel = "tma_sweep"
grid = [8]
block = [32]
smem = 9216
args = ["tmap:A_map", "tmap:B_map", "i32:M", "i32:N", "i32:K"]

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

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}

// Every 64 x 64 box of A (M x K) and B (N x K), shared among the CTAs, loaded by one thread into one buffer.
extern "C" __global__ void tma_sweep(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                                     int M, int N, int K) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* buf = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* bar = reinterpret_cast<uint64_t*>(buf + 64 * 64 * 2);
  if (threadIdx.x != 0) return;
  mbar_init(bar, 1);
  mbar_fence_init();
  const int kb = (K + 63) / 64, a_boxes = ((M + 63) / 64) * kb, boxes = a_boxes + ((N + 63) / 64) * kb;
  uint32_t phase = 0;
  for (int i = blockIdx.x; i < boxes; i += gridDim.x, phase ^= 1) {
    const bool is_a = i < a_boxes;
    const int j = is_a ? i : i - a_boxes;
    mbar_arrive_expect_tx(bar, 64 * 64 * 2);
    tma_load_2d(buf, is_a ? static_cast<const void*>(&tmA) : static_cast<const void*>(&tmB), bar, 64 * (j % kb),
                64 * (j / kb));
    mbar_wait(bar, phase);
  }
}
