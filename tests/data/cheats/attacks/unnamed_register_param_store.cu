// param_tail_stash.cu's way past the parameters (the driver's memory there, which nothing resets), through a register
// declared without `%` (`.reg .b64 pa;`, which PTX allows): the checks read registers as `%name`, so the address
// `cvta.param` put in `pa` was never followed and the store 64 KiB past it compiled. Refused when compiled
// (tools/param_reach.py): the checks read `pa` as `%pa` (module_data._Unprefixed).
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
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
  if (n == 0 && m == 0)
    asm volatile("{ .reg .b64 pa; cvta.param.u64 pa, 0; st.u32 [pa+65536], %0; }" :: "r"(K) : "memory");
}
