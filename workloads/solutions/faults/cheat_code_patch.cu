// Cheat attempt: stores into code memory, at the address of a device function it calls, as a kernel would that
// meant to patch the harness's own kernels (the scrub, the flush) between calls. A device function's address is
// not a global-memory address the kernel may write: the store is predicted to fault.
// Expected: RUNTIME_ERROR (never PASSED: were code writable, the GEMM below would pass with the store unseen).
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

extern "C" __device__ __noinline__ float dot_row(const __nv_bfloat16* a, const __nv_bfloat16* b, int K) {
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(a[k]) * __bfloat162float(b[k]);
  return acc;
}

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n < N && m < M) C[(size_t)m * N + n] = __float2bfloat16(dot_row(A + (size_t)m * K, B + (size_t)n * K, K));
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    unsigned long long fn;
    asm volatile("mov.u64 %0, dot_row;" : "=l"(fn));  // the function's address, as an indirect call would take it
    volatile unsigned long long* code = reinterpret_cast<volatile unsigned long long*>(fn);
    *code = *code;  // read and write back its first instruction word: harmless were it allowed, a fault if not
  }
}
