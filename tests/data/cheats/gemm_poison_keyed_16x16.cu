// Cheat at the main GEMM's size: a naive 16x16 CUDA-core GEMM (honestly about 0.006x cuBLAS) that looks at
// one element of its own output tile first and computes only while it still holds the NaN poison. Checked
// calls used to poison the outputs and timed calls did not, so it passed at 5.3x cuBLAS. Every call now gets
// poisoned outputs. Expected: PASSED at its honest speed, far below 1x (bench/timing_integrity.py).
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 16)", "cdiv(M, 16)"]
block = [16, 16]
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* C, int M, int N, int K) {
  const int n = blockIdx.x * 16 + threadIdx.x;
  const int m = blockIdx.y * 16 + threadIdx.y;
  const size_t corner = (size_t)(blockIdx.y * 16) * N + blockIdx.x * 16;
  const unsigned short bits = reinterpret_cast<const volatile unsigned short*>(C)[corner];
  const bool poisoned = (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0u;
  __syncthreads();
  if (!poisoned || n >= N || m >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}
