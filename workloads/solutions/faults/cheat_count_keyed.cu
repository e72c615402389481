// Cheat: counts its launches in a module global and stops computing after the eighth, which used to be
// inside the timing loop (the checked calls come first). Module globals now go back to their load-time
// values before every call, so every call is its first. Expected: PASSED, speedup below 1.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

__device__ unsigned int g_launches;
__device__ unsigned int g_blocks_done;

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  const unsigned int launches = *(volatile unsigned int*)&g_launches;
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (launches < 8 && n < N && m < M) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
    C[(size_t)m * N + n] = __float2bfloat16(acc);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&g_blocks_done, 1u) == gridDim.x * gridDim.y - 1) {  // the last block: every block has read
      g_launches = launches + 1;
      g_blocks_done = 0;
      __threadfence();
    }
  }
}
