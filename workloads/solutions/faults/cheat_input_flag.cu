// Cheat: marks the last element of its input A after computing, and skips all work on a call whose A
// carries the mark (inputs used not to be rewritten between timed calls). Every call now starts from
// restored inputs, and any write into an input is caught after the call. Expected: INCORRECT_NUMERICAL,
// "modified its input".
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

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  unsigned short* mark = reinterpret_cast<unsigned short*>(const_cast<__nv_bfloat16*>(A)) + ((size_t)M * K - 1);
  const bool seen = *(volatile unsigned short*)mark == 0x7F7Fu;
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (!seen && n < N && m < M) {
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
    C[(size_t)m * N + n] = __float2bfloat16(acc);
  }
  __syncthreads();
  if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && threadIdx.x == 0) *(volatile unsigned short*)mark = 0x7F7Fu;
}
