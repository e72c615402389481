// Naive GEMM C = A @ B^T in device-only CUDA with inline PTX: one thread per element of C.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm_naive"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["tmap:A_rows", "A", "B", "C", "i32:M", "i32:N", "i32:K"]

[tmap.A_rows]
tensor = "A"
box = [64, 1]
*/
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>

#define DEVICE __device__ __forceinline__

namespace {
DEVICE void prefetch_row(const CUtensorMap* map, int x, int y) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
               :: "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y) : "memory");
}
}  // namespace

extern "C" __global__ void __launch_bounds__(128) gemm_naive(const __grid_constant__ CUtensorMap a_rows,
                                                             const __nv_bfloat16* __restrict__ A,
                                                             const __nv_bfloat16* __restrict__ B,
                                                             __nv_bfloat16* __restrict__ C,
                                                             int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (threadIdx.x == 0) prefetch_row(&a_rows, 0, m);
  if (n >= N || m >= M) return;
  float acc = 0.f;
#pragma unroll 4
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}
