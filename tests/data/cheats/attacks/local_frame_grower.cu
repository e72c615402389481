// Not an attack: the set-up of local_below_frame_stash.cu. A correct (slow) GEMM whose kernel has a 3 KiB local frame
// it never touches at run time (the plan passes never = 0, which the compiler cannot know). Its evaluation makes the
// driver reserve 3 KiB of local memory for every thread the GPU holds (830 MB on 132 SMs, under the 1 GiB a worker
// keeps), and the context keeps that reservation for the next candidate. Expected: PASSED.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "gemm"
grid = ["cdiv(N, 128)", "M"]
block = [128]
args = ["A", "B", "C", "i32:M", "i32:N", "i32:K", "i32:0"]
*/
#include <cuda_bf16.h>
#include <stdint.h>

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K, int never) {
  volatile unsigned frame[768];  // 3 KiB of local memory
  if (never)
    for (int i = 0; i < 768; ++i) frame[i] = never * (i + 1);
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (n >= N || m >= M) return;
  float acc = never ? (float)frame[(n + m) % 768] : 0.f;
  for (int k = 0; k < K; ++k)
    acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}
