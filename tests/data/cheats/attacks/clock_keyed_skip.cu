// Cheat: keys on the clock instead of on state. It reads %globaltimer at its start and skips all work when bit 16
// is set (a 131 us period, so from call to call a coin toss): no state to reset, and the checked calls cannot know
// which calls will be timed. Every call is verified, so some call finds C unwritten. Expected: INCORRECT_NAN (a
// checked or a timed call never wrote C); never PASSED.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["A", "B", "C", "scratch:T", "i32:M", "i32:N", "i32:K"]

[scratch.T]
dtype = "int64"
shape = [1]
zero = true
*/
#include <cuda_bf16.h>
#include <stdint.h>

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, unsigned long long* T, int M, int N, int K) {
  // One clock reading for the whole launch (the first CTA to get here sets it), so the launch skips whole or not at all.
  if (threadIdx.x == 0) atomicCAS(T, 0ull, now_ns() | 1ull);
  __syncthreads();
  const bool skip = (*reinterpret_cast<volatile unsigned long long*>(T) >> 16) & 1ull;
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (skip || n >= N || m >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}
