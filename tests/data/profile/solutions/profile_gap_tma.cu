// A kernel that tells the profile's replay from the evaluated calls by the time between its two launches. `stamp`
// writes %globaltimer to a scratch word; `gemm_or_sweep` reads it again at its start. In an evaluated call the two
// launches run back to back (microseconds apart); under Nsight Compute each launch is profiled on its own, milliseconds
// apart. The replay cannot hide that gap, so the kernel behaves:
//   evaluated (gap < 2 ms): C computed from plain loads, no TMA -> correct, PASSED, no TMA ever
//   profiled  (gap >= 2 ms): a TMA sweep of every 64 x 64 box of A and B (work share 1.0, no plain loads beside it),
//                            C never written -> the counters alone say TMA `executed`
// The profiled call's output is wrong, so its counters must not be credited: the runtime verdict of a kernel that never
// ran TMA in an evaluated call is not `executed`.
// tests/tools/test_profile_gpu.py::test_a_kernel_that_behaves_otherwise_under_the_profiler_gets_no_target_credit.
/* ptxbench
language = "cuda"

[[launch]]
kernel = "stamp"
grid = [1]
block = [32]
args = ["scratch:T"]

[[launch]]
kernel = "gemm_or_sweep"
grid = ["cdiv(N, 128)", "M"]
block = [128]
smem = 12288
args = ["A", "B", "C", "scratch:T", "tmap:A_map", "tmap:B_map", "i32:M", "i32:N", "i32:K"]

[scratch.T]
dtype = "int64"
shape = [1]

[tmap.A_map]
tensor = "A"
box = [64, 64]

[tmap.B_map]
tensor = "B"
box = [64, 64]
*/
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "ptxbench/mbarrier.cuh"
#include "ptxbench/tma.cuh"

using namespace ptxbench;

#define PROFILED_GAP_NS 2000000ull  // 2 ms: far above back-to-back launches, far below ncu's time between kernels

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void stamp(long long* T) {
  if (threadIdx.x == 0) T[0] = (long long)now_ns();
}

extern "C" __global__ void gemm_or_sweep(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                         __nv_bfloat16* __restrict__ C, const long long* T,
                                         const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                                         int M, int N, int K) {
  __shared__ int profiled;
  if (threadIdx.x == 0) profiled = now_ns() - (unsigned long long)T[0] >= PROFILED_GAP_NS;
  __syncthreads();
  if (!profiled) {  // an evaluated call: the GEMM from plain loads
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int m = blockIdx.y;
    if (n >= N || m >= M) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k)
      acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[(size_t)n * K + k]);
    C[(size_t)m * N + n] = __float2bfloat16(acc);
    return;
  }
  // the profiled call: every box of A and B through TMA, by thread 0 of the first 8 CTAs; C is left as it was
  const int cta = blockIdx.y * gridDim.x + blockIdx.x;
  if (threadIdx.x != 0 || cta >= 8) return;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* buf = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* bar = reinterpret_cast<uint64_t*>(buf + 64 * 64 * 2);
  mbar_init(bar, 1);
  mbar_fence_init();
  const int kb = (K + 63) / 64, a_boxes = ((M + 63) / 64) * kb, boxes = a_boxes + ((N + 63) / 64) * kb;
  uint32_t phase = 0;
  for (int i = cta; i < boxes; i += 8, phase ^= 1) {
    const bool is_a = i < a_boxes;
    const int j = is_a ? i : i - a_boxes;
    mbar_arrive_expect_tx(bar, 64 * 64 * 2);
    tma_load_2d(buf, is_a ? static_cast<const void*>(&tmA) : static_cast<const void*>(&tmB), bar, 64 * (j % kb),
                64 * (j / kb));
    mbar_wait(bar, phase);
  }
}
