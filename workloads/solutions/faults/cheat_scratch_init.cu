// Cheat: a split-K GEMM whose int64 workspace is declared without `zero = true` and taken to start at the fill
// the harness used to put in non-zeroed scratch before every call, outside the measured interval (every byte 0x5A):
// the zeroing a split-K workspace needs, which `zero = true` times inside the interval, came for free. Each of two
// CTAs per element adds its half of the dot product, in fixed point, to the workspace; `finish` subtracts the known
// fill and converts. Non-zeroed scratch now holds fresh random bytes before every call, so the fill is unknown and
// the output wrong. Expected: INCORRECT_NUMERICAL (with the fixed fill it passed, its zeroing untimed).
/* ptxbench
language = "cuda"

[[launch]]
kernel = "partial"
grid = ["cdiv(N, 128)", "M", 2]
block = [128]
args = ["A", "B", "scratch:ws", "i32:M", "i32:N", "i32:K"]

[[launch]]
kernel = "finish"
grid = ["cdiv(M * N, 256)"]
block = [256]
args = ["scratch:ws", "C", "i32:M * N"]

[scratch.ws]
dtype = "int64"
shape = ["M", "N"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

#define FILL 0x5A5A5A5A5A5A5A5All  // what every non-zeroed scratch byte used to be before every call
#define SCALE 1048576.0f           // 2^20: fixed point, exact to ~1e-6 for |C| up to ~8e12

extern "C" __global__ void partial(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                   unsigned long long* __restrict__ ws, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  const int half = K / 2, k0 = blockIdx.z * half, k1 = blockIdx.z ? K : half;
  float acc = 0.f;
  for (int k = k0; k < k1; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  atomicAdd(&ws[(size_t)m * N + n], (unsigned long long)llrintf(acc * SCALE));  // two's complement: adds signed
}

extern "C" __global__ void finish(const unsigned long long* __restrict__ ws, __nv_bfloat16* __restrict__ C, int MN) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= MN) return;
  const long long fixed = (long long)(ws[i] - (unsigned long long)FILL);
  C[i] = __float2bfloat16((float)fixed / SCALE);
}
