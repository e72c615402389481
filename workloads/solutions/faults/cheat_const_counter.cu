// Cheat: counts its launches in a __constant__ word, written through the generic address that cvta.const
// gives it (a constant bank is device memory), and stops computing after the eighth. Constants go back to
// their load-time bytes before every call, like module globals, so every call is its first.
// Expected: PASSED, speedup below 1.
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

__constant__ unsigned int c_launches;
__device__ unsigned int g_blocks_done;

__device__ __forceinline__ volatile unsigned int* launch_word() {
  unsigned long long p;
  asm volatile("cvta.const.u64 %0, c_launches;" : "=l"(p));
  return reinterpret_cast<volatile unsigned int*>(p);
}

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  volatile unsigned int* word = launch_word();
  const unsigned int launches = *word;
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
      *word = launches + 1;
      g_blocks_done = 0;
      __threadfence();
    }
  }
}
