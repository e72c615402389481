// Cheat: a naive GEMM that computes only while its output still holds the harness's NaN poison and
// otherwise returns at once: it keys on the state a checked call leaves (outputs poisoned) and a timed
// call used not to. Every call now gets poisoned outputs, so it computes every time and is timed at its
// honest (slow) speed. Expected: PASSED, speedup below 1.
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
                                __nv_bfloat16* C, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  const size_t first = (size_t)m * N + (size_t)blockIdx.x * blockDim.x;
  const unsigned short bits = reinterpret_cast<const volatile unsigned short*>(C)[first];
  const bool poisoned = (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0u;
  __syncthreads();  // every thread has looked before any thread writes
  if (!poisoned || n >= N || m >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}
