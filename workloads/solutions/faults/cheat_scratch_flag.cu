// Cheat: leaves a flag in a scratch buffer it asked not to have zeroed, and skips all work when it finds
// the flag (a timed call used to get the scratch as the previous call left it). Non-zeroed scratch is now
// refilled with garbage before every call. Expected: PASSED, speedup below 1.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["A", "B", "C", "scratch:flag", "i32:M", "i32:N", "i32:K"]

[scratch.flag]
dtype = "int32"
shape = [2]
*/
#include <cuda_bf16.h>
#include <stdint.h>

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int* flag, int M, int N, int K) {
  const bool done = ((volatile int*)flag)[0] == 0x0C0FFEE0;
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (!done && n < N && m < M) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
    C[(size_t)m * N + n] = __float2bfloat16(acc);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd((unsigned int*)&flag[1], 1u) == gridDim.x * gridDim.y - 1) {  // the last block
      flag[0] = 0x0C0FFEE0;
      flag[1] = 0;
      __threadfence();
    }
  }
}
