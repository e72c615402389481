// Cheat: counts its launches in the alignment padding between two __constant__ words and stops computing after the
// eighth (the checked calls come first). `c_lo` and `c_hi` are each aligned to 4 KiB, so ptxas puts them 4 KiB apart
// in the module's constant bank; the word 64 bytes past the first is the module's but no symbol's, and the generic
// address cvta.const gives reaches it. Restoring each constant by its symbol left it counting. Expected (the bank's
// section restored whole): every call is its first; PASSED, speedup below 1. Before that fix: the ninth call, a
// timed one, writes nothing and fails (INCORRECT_NAN).
// Refused when compiled (tools/module_data.py): `cvta.const` makes a constant's address generic.
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

__constant__ __align__(4096) unsigned int c_lo[4] = {1, 2, 3, 4};
__constant__ __align__(4096) unsigned int c_hi[4] = {5, 6, 7, 8};
__device__ unsigned int g_blocks_done;

__device__ __forceinline__ volatile unsigned int* launch_word() {
  unsigned long long lo, hi;
  asm volatile("cvta.const.u64 %0, c_lo;" : "=l"(lo));
  asm volatile("cvta.const.u64 %0, c_hi;" : "=l"(hi));
  return reinterpret_cast<volatile unsigned int*>((lo < hi ? lo : hi) + 64);  // in the padding, past both words
}

extern "C" __global__ void gemm(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  volatile unsigned int* word = launch_word();
  const unsigned int launches = *word;
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y;
  if (launches < 8 && n < N && m < M) {
    float acc = c_lo[0] - 1.f + c_hi[0] - 5.f;  // 0: the two words are read, so ptxas keeps both
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
